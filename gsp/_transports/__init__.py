"""The built-in transports, registered through gsp's own entry points like any plugin.
"""
