"""The WSGI application (gunicorn ``redlease_site.wsgi``). With ``REDLEASE_TEST_MASTER_LOCK``
set, the process that imports it takes that lock and keeps it (its watchdog renews it): under
``gunicorn --preload`` the master has used its client, with a thread running, before it forks
the workers."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "redlease_site.settings")
application = get_wsgi_application()

if os.environ.get("REDLEASE_TEST_MASTER_LOCK"):
    from redlease.contrib.django import lock

    lock(os.environ["REDLEASE_TEST_MASTER_LOCK"]).acquire()
