"""Grid and random sweeps over config fields, queued as one run group (like the ablation ladder).

    plan.py    a sweep checked (``parse``), its runs' values (``expand``), their configs (``plan``)
    form.py    the new-run form's sweep panel
    views.py   launching a sweep from the form (``launch_sweep``) and the API (``SweepCreate``)
    urls.py    /runs/new/sweep/; api_urls.py: /api/sweeps/

The comparison of a sweep's runs is the compare app's (its sweep chart: compare.sweep_chart).
"""
