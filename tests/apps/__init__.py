"""WSGI apps that tests/support/servers.py serves with real gunicorn and uWSGI processes."""
