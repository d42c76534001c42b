#!/usr/bin/env bash
# Make bench/peers/.venv: the peers (Celery, Dramatiq, taskiq, arq, RQ, procrastinate),
# matplotlib, psutil and py-spy at the exact pins of requirements.txt, plus this checkout
# of tidings (editable, so the benchmark always measures the tree it sits in) with
# whatever its pyproject.toml asks for beyond those pins. Re-run it after tidings gains
# a dependency.
#   bash bench/peers/setup.sh            # PYTHON=python3.12 bash bench/peers/setup.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3.11}"
if [[ ! -x "$here/.venv/bin/python" ]]; then
  "$python" -m venv "$here/.venv"
fi
"$here/.venv/bin/python" -m pip install --quiet --upgrade pip
"$here/.venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"
"$here/.venv/bin/python" -m pip install --quiet -e "$here/../..[postgres]"
"$here/.venv/bin/python" -m pip check
echo "peer venv ready: $here/.venv/bin/python bench/peers/run.py --help"
