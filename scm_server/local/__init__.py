"""The local cluster harness: SCM processes and simulated datanodes on this machine, without Kubernetes.

What ``ozone-scm local ...`` (``scm_server/cli/local.py``), ``make run``, the benchmarks and the tests start and stop:

* ``cluster``: one or more SCM processes under a base directory (their ``ozone-site.xml``, ports, ``scm --init``,
  start/stop, web pages);
* ``quorum``: a 3- or 5-SCM HA ring (``--init`` / ``--bootstrap`` order, leader discovery, adding an SCM), plain or
  secure (``secure``: a test root CA, enrolment, client certificates);
* ``members`` and ``procs``: finding running members again by identity, and stopping exactly them (never a reused PID);
* ``throughput``: the block/container allocation workload behind ``freon`` and the benchmarks.

It talks to SCM only through ``scm_server.client`` and the CLI processes it starts, and it never imports the click
layer (``scm_server.cli``): the commands are thin wrappers around it.
"""
