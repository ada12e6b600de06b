#!/usr/bin/env bash
# One process on one device (device 0 unless DEVICE_ID is set); arguments go to main.py.
#   bash launch/run_1p.sh --dummy -a resnet50 -b 256 --amp
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python}" main.py --gpu "${DEVICE_ID:-0}" "$@"
