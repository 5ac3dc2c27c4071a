#!/usr/bin/env bash
# Installs recbole-ext into ./.venv (created if missing) on a fresh machine, CPU only.
#   bash scripts/install.sh          runtime + Ray Tune extra
#   bash scripts/install.sh test     also the test tools
# Why three pip calls: see README "Why this stack".
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-tune}"
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip >/dev/null
# torch first and pinned exactly: 2.13.0 is the local CPU wheel; a looser spec pulls GBs of CUDA wheels.
pip install -q torch==2.13.0
# RecBole without its pins (ray<=2.6.3 would force numpy<2 and an old Ray); its other runtime
# dependencies come from our setup.cfg.
pip install -q --no-deps recbole==1.2.1
pip install -q -e ".[${extra}]"
python -c "import recbole_ext; print('recbole-ext', recbole_ext.__version__, 'ready')"
