"""``rabbitmqctl`` for the tests that need the local RabbitMQ: virtual hosts of their
own (``tests/conftest.py``), cut connections and restarts (``test_broker_restart.py``)."""

from __future__ import annotations

import subprocess


def rabbitmqctl_run(*args: str) -> str:
    """Run ``rabbitmqctl -q …``; its output, or RuntimeError with its complaint."""
    done = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True,
                          timeout=120, check=False)
    if done.returncode:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout
