"""Notifications: a run that succeeds, fails or stalls tells its owner, by webhook and by e-mail.

    models.py         each user's settings, and the outbox: one Notification row per event and channel
    delivery.py       queueing (on ``runs.signals.run_finished``, and stalls) and sending, with retries
    preferences.py    checking and saving a user's settings (the page and the API share the checks)
    address.py        verifying the notification address by a link mailed to it
    webhook_urls.py   which webhook URLs are allowed (normalised, then compared to DAPO_WEBHOOK_URLS)
    views.py, api.py  the settings page and the API; urls.py, api_urls.py their routes

The runs app knows nothing of this one: ``Run.finish`` sends ``run_finished``, which ``ready()`` connects.
"""
