# Ray on a Slurm allocation: shell functions sourced by gatesweep.sbatch (and by its test).
#
#   ros_nodes              the allocation's hosts, one a line (scontrol show hostnames)
#   ros_node_ip NODE       the address Slurm has for NODE (its NodeAddr), else what NODE resolves to
#   ros_start_ray          a Ray head on the first node, a Ray worker on each other node (srun),
#                          with the CPUs and GPUs Slurm gave each node; sets ROS_ADDRESS (HEAD:PORT)
#   ros_wait_nodes N SECS [HEAD_PID]  until N Ray nodes are alive (status 1 on a timeout, naming what
#                          joined, or at once when the head's srun HEAD_PID exited)
#   ros_stop_ray           stops every Ray process these functions started (by pid)
#
# Settings (environment):
#   GATESWEEP_PYTHON    the Python of gatesweep's environment (default: the one beside `gatesweep` on PATH)
#   GATESWEEP_RAY_PORT  the head's GCS port (default 6379)
#   GATESWEEP_RAY_TEMP  Ray's session folder on every node (default /tmp/ray-gs-$SLURM_JOB_ID; short:
#                       Ray's socket paths have a length limit)

ros_say() { printf "gatesweep.sbatch [%s]: %s\n" "$(date +%T)" "$*" >&2; }

ros_python() {
    if [ -n "${GATESWEEP_PYTHON:-}" ]; then
        printf '%s\n' "$GATESWEEP_PYTHON"
    elif command -v gatesweep >/dev/null 2>&1; then
        printf '%s\n' "$(dirname "$(command -v gatesweep)")/python"
    else
        command -v python3
    fi
}

# `ray` with gatesweep's head guard installed: the head makes no cloud-metadata probe (docs/reliability.md)
ROS_RAY_MAIN=orchestrator.runtime.ray_cli

ros_nodes() {
    scontrol show hostnames "${SLURM_JOB_NODELIST:?not inside a Slurm allocation (SLURM_JOB_NODELIST is unset)}"
}

ros_node_ip() {
    local addr
    addr=$(scontrol show node "$1" -o 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p')
    if [ -z "$addr" ] || [ "$addr" = "$1" ]; then
        addr=$(getent ahostsv4 "$1" | awk 'NR == 1 {print $1}')
    fi
    printf '%s\n' "${addr:-$1}"
}

# CPUs and GPUs of this node's share of the job: Slurm's per-task CPUs when given, else the node's
ros_cpus() { printf '%s\n' "${SLURM_CPUS_PER_TASK:-${SLURM_CPUS_ON_NODE:-1}}"; }
ros_gpus() {
    local g="${SLURM_GPUS_ON_NODE:-0}"
    case "$g" in '' | *[!0-9]*) g=0 ;; esac
    printf '%s\n' "$g"
}

ROS_PIDS=()

ros_start_ray() {
    local py nodes head ip port temp cpus gpus
    py=$(ros_python)
    mapfile -t nodes < <(ros_nodes)
    head=${nodes[0]}
    ip=$(ros_node_ip "$head")
    port=${GATESWEEP_RAY_PORT:-6379}
    temp=${GATESWEEP_RAY_TEMP:-/tmp/ray-gs-${SLURM_JOB_ID:-$$}}
    cpus=$(ros_cpus)
    gpus=$(ros_gpus)
    case "$ip" in
        # Ray rewrites 127.0.0.1 to the machine's network address unless told this (as gatesweep does for its local Ray)
        127.0.0.1) export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ;;
    esac
    export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"
    ROS_ADDRESS="$ip:$port"
    ROS_NODE_COUNT=${#nodes[@]}
    # the batch shell runs on the first node: a port another program holds would cost Ray's own
    # 40 s of retries and a traceback before it fails
    if ! "$py" -c 'import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], int(sys.argv[2])))' "$ip" "$port" 2>/dev/null; then
        ros_say "port $port on $ip (the Ray head's) is taken by another program; set GATESWEEP_RAY_PORT to a free one"
        return 1
    fi
    ros_say "Ray head on $head ($ROS_ADDRESS, $cpus CPU, $gpus GPU); ${#nodes[@]} node(s): ${nodes[*]}"
    # --overlap: the Ray steps share the allocation with the batch step that runs gatesweep
    srun --overlap --nodes=1 --ntasks=1 -w "$head" --kill-on-bad-exit=0 \
        "$py" -m "$ROS_RAY_MAIN" start --head --block --node-ip-address "$ip" --port "$port" \
        --num-cpus "$cpus" --num-gpus "$gpus" --include-dashboard false --temp-dir "$temp" --disable-usage-stats &
    ROS_PIDS+=($!)
    ros_wait_nodes 1 "${GATESWEEP_RAY_START_TIMEOUT:-180}" "$!" || return 1
    local node wip
    for node in "${nodes[@]:1}"; do
        wip=$(ros_node_ip "$node")
        srun --overlap --nodes=1 --ntasks=1 -w "$node" --kill-on-bad-exit=0 \
            "$py" -m "$ROS_RAY_MAIN" start --block --address "$ROS_ADDRESS" --node-ip-address "$wip" \
            --num-cpus "$cpus" --num-gpus "$gpus" --temp-dir "$temp" --disable-usage-stats &
        ROS_PIDS+=($!)
    done
}

ros_wait_nodes() {
    local want=$1 secs=$2 head_pid=${3:-0}
    RAY_ADDRESS="$ROS_ADDRESS" "$(ros_python)" - "$want" "$secs" "$head_pid" <<'PY'
import os, sys, time
want, secs, head_pid = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])


def head_gone() -> bool:
    """The head's srun has exited (a zombie until the batch shell reaps it)."""
    try:
        with open(f"/proc/{head_pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


address = os.environ.pop("RAY_ADDRESS")
deadline, alive, err = time.time() + secs, 0, "no answer"
import ray
while time.time() < deadline:
    time.sleep(1)
    if head_pid and head_gone():
        print(f"gatesweep.sbatch: the Ray head exited before it answered at {address} (its lines are above)", file=sys.stderr)
        sys.exit(1)
    try:
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        alive = sum(1 for n in ray.nodes() if n.get("Alive"))
        if alive >= want:
            print(f"gatesweep.sbatch: {alive} Ray node(s) alive at {address}", file=sys.stderr)
            sys.exit(0)
    except Exception as e:  # the head is still starting (ray.init raises several kinds)
        err = (str(e).splitlines() or [type(e).__name__])[0][:200]
print(f"gatesweep.sbatch: {alive} of {want} Ray node(s) joined {address} within {secs:g} s ({err})", file=sys.stderr)
sys.exit(1)
PY
}

ros_stop_ray() {
    local pid
    for pid in "${ROS_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true  # srun passes it to its `ray start --block`, which stops its node
    done
    for pid in "${ROS_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    ROS_PIDS=()
}
