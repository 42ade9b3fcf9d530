"""The ``ozone-scm`` command line (thin: parses, calls ``scm_server.client``, prints)."""
