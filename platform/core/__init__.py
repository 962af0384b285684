"""The platform's bottom layer: what every app may import, and which imports no app.

    params.py            integers and ids from requests (query strings, forms, JSON), with their bounds
    openapi.py           the API's OpenAPI helpers: ``extend_schema``, query parameters, their parsing
    security_headers.py  the Content-Security-Policy and the other security headers of every response

``config`` holds the settings and the URLs; the apps (``runs``, ``catalog``, ``notifications``, ``sweeps``,
``inspector``, ``compare``) build on this package, and an import contract (pyproject.toml) keeps it from
importing any of them.
"""
