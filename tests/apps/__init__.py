"""WSGI apps that tests/servers.py serves with real gunicorn and uWSGI processes."""
