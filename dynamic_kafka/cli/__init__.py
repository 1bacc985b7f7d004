"""The ``dynamic-kafka`` command line: the dispatcher (``main``) and one module per subcommand group."""
