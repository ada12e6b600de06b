#!/usr/bin/env bash
# One training process per device of this node, each with its own log; fail fast.
#
#   bash launch/run_8p.sh                      # the CPU demo: demo data, tinynet, >= 90 % top-1
#   bash launch/run_8p.sh /data/imagenet -a resnet50 -b 2048 --amp   # arguments go to main.py
#   SCRIPT=train.py bash launch/run_8p.sh --my-flag                  # any script, its arguments
#
# Environment (all optional):
#   SCRIPT          the program each rank runs (default: this repository's main.py)
#   NPROC_PER_NODE  processes on this node (default: the device count; 2 on a CPU)
#   NNODES, NODE_RANK       nodes in the run and this node's index (default 1 and 0)
#   MASTER_ADDR, MASTER_PORT  node 0's address and a port every rank uses
#                           (default: 127.0.0.1 and a free port; required with NNODES > 1)
#   LOG_DIR         per-rank logs rank_<i>.log (default ./logs); rank 0 also prints here
#   BIND_CORES=1    pin each rank to its share of this node's cores with taskset (and
#                   give it that many compute threads unless OMP_NUM_THREADS is set)
#   PYTHON          the interpreter (default python)
#   MAX_RESTARTS=N  when a rank fails, stop all and start them again, up to N times (give
#                   the script a way to continue, e.g. main.py --resume auto --save-every K)
# Paths are relative to the directory you run it from. When any rank fails, the others are
# stopped and the script exits with its exit code; SIGINT, SIGTERM or SIGHUP stop every
# rank and exit 128 + the signal's number, at any moment, also when this script was started
# in the background of another one (which starts it with SIGINT ignored); a SIGHUP ignored
# on entry (nohup) stays ignored. However the script ends, even SIGKILLed, its ranks end too.
set -euo pipefail

# Signals come first, before any other command runs. Bash can neither trap nor reset a
# signal ignored on entry, and a script started with `&` by a non-interactive shell (a job
# script, a CI step beside others) gets SIGINT ignored: SIGINT would do nothing and the
# ranks would train on. So with SIGINT or SIGTERM ignored the script starts again, same
# pid and arguments, with both at their defaults (read from /proc: no command runs here).
sig_ignored=0
if [[ -r /proc/$$/status ]]; then
    while read -r field value; do
        if [[ $field == SigIgn: ]]; then sig_ignored=$(( 16#$value )); fi
    done < "/proc/$$/status"
fi
if (( sig_ignored & (1 << (2 - 1) | 1 << (15 - 1)) )) && [[ -z ${RUN_8P_SIGNALS_RESET:-} ]] \
        && command -v "${PYTHON:-python}" >/dev/null 2>&1; then
    bash_options=()
    if [[ $- == *x* ]]; then bash_options+=(-x); fi
    RUN_8P_SIGNALS_RESET=1 exec "${PYTHON:-python}" -c '
import os, signal, sys
for number in (signal.SIGINT, signal.SIGTERM):
    signal.signal(number, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$BASH" "${bash_options[@]}" "${BASH_SOURCE[0]}" "$@"
fi
unset RUN_8P_SIGNALS_RESET sig_ignored

# The traps come before any command bash waits for: without a trap, a SIGINT that came
# while bash waited for a command was dropped unless the command died of it too (bash takes
# it that the command handled it), and the ranks started anyway. RANK_OF: pid -> local rank.
declare -A RANK_OF=()

# Signals the process group of each rank (its loader workers too) and, where there is none
# yet (a rank that has not reached setsid), the rank itself.
signal_rank() { kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null || true; }

stop_all() {
    local pid pids deadline
    # Every rank, also one started a moment ago whose pid is not in RANK_OF yet.
    mapfile -t pids < <(jobs -p)
    pids+=("${!RANK_OF[@]}")
    for pid in "${pids[@]}"; do signal_rank TERM "$pid"; done
    # A rank still there 10 s later is killed: one that ignores SIGTERM, or one that was
    # between bash's fork and its exec when SIGTERM came (bash drops it there).
    deadline=$(( SECONDS + 10 ))
    for pid in "${pids[@]}"; do
        (( SECONDS < deadline )) && timeout "$(( deadline - SECONDS ))" tail --pid="$pid" -f /dev/null 2>/dev/null \
            || signal_rank KILL "$pid"
    done
}
for signal in INT:130 TERM:143 HUP:129; do
    # One stop: a signal that comes while the ranks are being stopped is taken and does
    # nothing (`:`, not '': the commands stop_all starts keep the default action).
    # shellcheck disable=SC2064  # the code is fixed now, per signal
    trap "trap : INT TERM HUP; stop_all; echo 'run_8p: ${signal%%:*} received: stopped every rank' >&2; exit ${signal#*:}" "${signal%%:*}"
done

# Sets REPLY to the line "$@" prints; returns its exit status. Not REPLY=$("$@"): bash drops
# a SIGINT that comes while it waits for a command substitution's process to exit (after
# its output ended), trap or not; `wait` returns at once, and the trap runs and stops "$@".
OUTPUT_FILE=$(mktemp 2>/dev/null) || OUTPUT_FILE=""
trap '[[ -z $OUTPUT_FILE ]] || rm -f -- "$OUTPUT_FILE"' EXIT
output_of() {
    REPLY=""
    if [[ -z $OUTPUT_FILE ]]; then REPLY=$("$@"); return; fi
    "$@" > "$OUTPUT_FILE" &
    wait "$!" || return
    read -r REPLY < "$OUTPUT_FILE" || true
}

# Sets REPLY to a TCP port free on loopback now. Python's socket module alone: importing
# devicekit would import torch, seconds of every start.
free_port() {
    output_of "$PYTHON" -c 'import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])'
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python}
SCRIPT=${SCRIPT:-$REPO/main.py}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
LOG_DIR=${LOG_DIR:-./logs}
# devicekit (and, for main.py, models/ and trainer/) import from here without an install.
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

die() { echo "error: $*" >&2; exit 2; }
is_count() { [[ $1 =~ ^[0-9]+$ ]] && (( $1 >= 1 )); }

command -v "$PYTHON" >/dev/null 2>&1 \
    || die "PYTHON=$PYTHON is not an executable on PATH: set PYTHON to your python interpreter"
[[ -f $SCRIPT ]] || die "SCRIPT=$SCRIPT does not exist (relative to $PWD): give the path of a .py file"
# LOG_DIR before any work (the demo data takes a while, the interpreter starts slowly): the
# nearest folder of it that exists must hold a file, which is made there and removed (root
# passes every check that only asks).
existing=$LOG_DIR
while [[ ! -e $existing ]]; do
    case $existing in */*) existing=${existing%/*}; existing=${existing:-/} ;; *) existing=. ;; esac
done
[[ -d $existing ]] || die "LOG_DIR=$LOG_DIR is not a folder ($existing is a file): set LOG_DIR to a folder for the rank logs"
probe=$(mktemp -p "$existing" .run_8p-probe.XXXXXX 2>/dev/null) && rm -f -- "$probe" \
    || die "LOG_DIR=$LOG_DIR cannot hold the rank logs (no file can be made in $existing): set LOG_DIR to a writable folder"

is_count "$NNODES" || die "NNODES=$NNODES must be a whole number >= 1"
[[ $NODE_RANK =~ ^[0-9]+$ ]] && (( NODE_RANK < NNODES )) \
    || die "NODE_RANK=$NODE_RANK must be a whole number below NNODES=$NNODES"
if [[ -z ${NPROC_PER_NODE:-} ]]; then
    output_of "$PYTHON" -m devicekit nproc || exit 2
    NPROC_PER_NODE=$REPLY
fi
is_count "$NPROC_PER_NODE" || die "NPROC_PER_NODE=$NPROC_PER_NODE must be a whole number >= 1"
MAX_RESTARTS=${MAX_RESTARTS:-0}
[[ $MAX_RESTARTS =~ ^[0-9]+$ ]] || die "MAX_RESTARTS=$MAX_RESTARTS must be a whole number >= 0"
PORT_IS_OURS=0
if (( NNODES > 1 )); then
    [[ -n ${MASTER_ADDR:-} ]] || die "NNODES=$NNODES needs MASTER_ADDR=<node 0's address> on every node"
    MASTER_PORT=${MASTER_PORT:-29500}
else
    MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
    if [[ -z ${MASTER_PORT:-} ]]; then
        PORT_IS_OURS=1
        free_port
        MASTER_PORT=$REPLY
    fi
fi

if (( $# == 0 )) && [[ $SCRIPT -ef $REPO/main.py ]]; then
    # The CPU demo: a small real-file dataset, generated once, and a model that learns it.
    "$PYTHON" -m trainer.demo_data data/demo
    set -- data/demo --arch tinynet --num-classes 10 --image-size 32 --epochs 24 \
        --batch-size 256 --lr 0.1 --lr-schedule cosine --workers 2 \
        --print-freq 20 --output-dir output/demo
fi

mkdir -p "$LOG_DIR"
# Every rank dies with this script, however the script ends (SIGKILL included, which no
# trap sees): the kernel kills it (util-linux's setpriv, 2.33 or newer). Without that
# setpriv, a rank that imports devicekit still asks the kernel itself.
DIE_WITH_SCRIPT=()
if setpriv --pdeathsig KILL true 2>/dev/null; then DIE_WITH_SCRIPT=(setpriv --pdeathsig KILL); fi
export MASTER_ADDR MASTER_PORT NODE_RANK DEVICEKIT_LAUNCHER_PID=$$
export WORLD_SIZE=$(( NNODES * NPROC_PER_NODE )) LOCAL_WORLD_SIZE=$NPROC_PER_NODE
if [[ ${BIND_CORES:-0} == 1 ]]; then
    # The cores this script may use (inside a container's cpuset they need not start at 0).
    output_of "$PYTHON" -c 'import os; print(*sorted(os.sched_getaffinity(0)))'
    read -r -a CPUS <<< "$REPLY"
    PER=$(( ${#CPUS[@]} / NPROC_PER_NODE > 0 ? ${#CPUS[@]} / NPROC_PER_NODE : 1 ))
fi

# Each rank's log collects every attempt (MAX_RESTARTS), so it is emptied once, here.
for (( i = 0; i < NPROC_PER_NODE; i++ )); do : > "$LOG_DIR/rank_$i.log"; done

start_ranks() {
    local i rank log bind share c cpus
    for (( i = 0; i < NPROC_PER_NODE; i++ )); do
        rank=$(( NODE_RANK * NPROC_PER_NODE + i ))
        bind=()
        if [[ ${BIND_CORES:-0} == 1 ]]; then
            share=()
            for (( c = 0; c < PER; c++ )); do share+=("${CPUS[(i * PER + c) % ${#CPUS[@]}]}"); done
            # One compute thread per core of its share, unless the user chose a number: the
            # rank cannot tell that its cores are already its own and would split them again.
            printf -v cpus '%s,' "${share[@]}"
            bind=(env "OMP_NUM_THREADS=${OMP_NUM_THREADS:-$PER}" taskset -c "${cpus%,}")
        fi
        log="$LOG_DIR/rank_$i.log"
        # setsid: each rank leads its own process group, so stopping it stops its loader workers.
        if (( i == 0 )); then
            LOCAL_RANK=$i RANK=$rank "${DIE_WITH_SCRIPT[@]}" setsid "${bind[@]}" "$PYTHON" "$SCRIPT" "$@" > >(tee -a "$log") 2>&1 &
        else
            LOCAL_RANK=$i RANK=$rank "${DIE_WITH_SCRIPT[@]}" setsid "${bind[@]}" "$PYTHON" "$SCRIPT" "$@" >> "$log" 2>&1 &
        fi
        RANK_OF[$!]=$i
    done
}

# Waits for the ranks; when one fails, stops the others. Sets `status`.
wait_ranks() {
    local finished code rank
    status=0
    while (( ${#RANK_OF[@]} > 0 )); do
        finished=""
        wait -n -p finished "${!RANK_OF[@]}" && code=0 || code=$?
        [[ -n $finished ]] || break
        rank=${RANK_OF[$finished]}
        unset "RANK_OF[$finished]"
        if (( code != 0 )); then
            kill -KILL -- "-$finished" 2>/dev/null || true  # its loader workers, if any
            echo "run_8p: local rank $rank failed first (exit code $code); see $LOG_DIR/rank_$rank.log;" \
                 "stopping the other ranks" >&2
            tail -n 5 "$LOG_DIR/rank_$rank.log" >&2 || true
            stop_all
            RANK_OF=()
            status=$code
            break
        fi
    done
    wait 2>/dev/null || true
}

attempt=0
while true; do
    echo "run_8p: $NPROC_PER_NODE process(es) of $SCRIPT on node $NODE_RANK of $NNODES, master" \
         "$MASTER_ADDR:$MASTER_PORT, logs in $LOG_DIR" >&2
    start_ranks "$@"
    wait_ranks
    if (( status == 0 || attempt >= MAX_RESTARTS )); then
        break
    fi
    attempt=$(( attempt + 1 ))
    echo "run_8p: restarting every rank (restart $attempt of MAX_RESTARTS=$MAX_RESTARTS)" >&2
    if [[ $PORT_IS_OURS == 1 ]]; then
        free_port
        MASTER_PORT=$REPLY
        export MASTER_PORT
    fi
done
exit "$status"
