"""The private core: sockets, endpoints, pipes and their greenlets, the registry, fork and
logging. Nothing outside gsp imports it.
"""
