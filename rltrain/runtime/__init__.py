"""The runtime under every layer: seeding, the stop request, the env-call watchdog, the
processes of a distributed run and memory probes."""
