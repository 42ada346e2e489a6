#!/bin/bash
# srun for the batch scripts of `tide sbatch` (docs/slurm.md, "srun"). The
# agent writes it into a Slurm job's control directory and puts that first
# on the job's PATH, in the sandbox and in OCI images alike (it needs bash,
# as the batch script's wrapper does).
#
# A Tide job's script runs on every node of the job (TIDE_NODE_RANK of
# TIDE_NNODES), so each node's srun starts the tasks of the step that
# Slurm's block distribution puts on that node: tasks 0..k-1 on node 0, the
# next ones on node 1, and so on. Each task gets SLURM_PROCID (its rank in
# the step), SLURM_LOCALID (its rank on the node), SLURM_NODEID,
# SLURM_NTASKS, SLURM_NPROCS, SLURM_STEP_NUM_TASKS, SLURM_STEP_NUM_NODES and
# SLURM_NNODES (the step's nodes), and SLURM_CPUS_PER_TASK or its own
# CUDA_VISIBLE_DEVICES when asked. srun waits for this node's tasks and
# exits with the highest exit code among them (128 + N for a signal), so a
# failing task fails the node's script, and a failing node fails the job.
# An option it cannot honour is refused, naming the option.

die() {
  echo "srun: error: $*" >&2
  exit 1
}

usage() {
  cat <<'EOF'
usage: srun [OPTIONS] COMMAND [ARGS...]   (tide's srun, inside a job of tide sbatch)
  -n, --ntasks=N           tasks in the step (default: the job's --ntasks, else one per node)
  -N, --nodes=N            nodes of the job the step uses (the first N)
      --ntasks-per-node=N  at most N tasks on each node
  -c, --cpus-per-task=N    sets SLURM_CPUS_PER_TASK for the tasks
      --gpus-per-task=N    each task sees N of the node's GPUs (CUDA_VISIBLE_DEVICES)
  -G, --gpus=N, --gpus-per-node=N, --gres=gpu[:TYPE]:N
                           the step uses that many of each node's GPUs
  -l, --label              prefix each line of output with the task's number
  -K, --kill-on-bad-exit   end the other tasks when one fails
      --export=ALL[,NAME=VALUE...]
  -D, --chdir=DIR          run the tasks in DIR
  -u, -J, -t, -p, -A, -q, -Q, -v, -W, --mem*, --cpu-bind, --gpu-bind, --exclusive,
  --overlap, --exact, --hint, --mpi=none, --distribution=block: accepted, no effect
EOF
}

if [ -z "$TIDE_NODE_RANK" ] || [ -z "$TIDE_NNODES" ]; then
  die "srun runs inside a job of tide sbatch (TIDE_NODE_RANK is not set)"
fi
node=$TIDE_NODE_RANK
job_nodes=$TIDE_NNODES

positive() {
  [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: \"$2\" is not a positive number"
}

# "[TYPE:]N" of --gpus and --gpus-per-node: the count.
gpu_count() {
  local n=${2##*:}
  positive "$1" "$n"
  echo "$n"
}

ntasks='' nodes='' per_node='' cpus='' gpus_per_task='' step_gpus='' total_gpus='' chdir=''
label=0 kill_bad=0
exports=()

while [ $# -gt 0 ]; do
  arg=$1
  case $arg in
    --) shift; break ;;
    --*=*) name=${arg%%=*}; value=${arg#*=}; has=1 ;;
    --*) name=$arg; value=; has=0 ;;
    -?) name=$arg; value=; has=0 ;;
    -?*) name=${arg:0:2}; value=${arg:2}; value=${value#=}; has=1 ;;
    *) break ;;
  esac
  shift
  case $name in
    -n) name=--ntasks ;; -N) name=--nodes ;; -c) name=--cpus-per-task ;; -G) name=--gpus ;;
    -l) name=--label ;; -u) name=--unbuffered ;; -J) name=--job-name ;;
    -K) name=--kill-on-bad-exit ;; -D) name=--chdir ;; -t) name=--time ;; -p) name=--partition ;;
    -A) name=--account ;; -q) name=--qos ;; -Q) name=--quiet ;; -v) name=--verbose ;;
    -W) name=--wait ;; -m) name=--distribution ;; -o) name=--output ;; -e) name=--error ;;
    -i) name=--input ;; -w) name=--nodelist ;; -x) name=--exclude ;; -C) name=--constraint ;;
    -h) name=--help ;; -V) name=--version ;; -O) name=--overcommit ;;
  esac
  case $name in
    --ntasks | --nodes | --ntasks-per-node | --cpus-per-task | --gpus | --gpus-per-node | \
      --gpus-per-task | --gres | --export | --job-name | --chdir | --time | --partition | \
      --account | --qos | --mem | --mem-per-cpu | --mem-per-gpu | --cpu-bind | --gpu-bind | \
      --distribution | --mpi | --wait | --hint | --output | --error | --input | --nodelist | \
      --exclude | --constraint | --multi-prog)
      if [ "$has" = 0 ]; then
        [ $# -gt 0 ] || die "$name needs a value"
        value=$1
        shift
      fi
      ;;
    --kill-on-bad-exit) ;;  # an optional value, only as --kill-on-bad-exit=0|1
    *)
      if [ "$has" = 1 ] && [ "${arg:0:2}" != "--" ]; then
        set -- "-$value" "$@"  # -lK: one flag, then the rest
      elif [ "$has" = 1 ]; then
        die "$name takes no value"
      fi
      ;;
  esac
  case $name in
    --ntasks) positive "$name" "$value"; ntasks=$value ;;
    --nodes)
      [[ $value =~ ^[1-9][0-9]*$ ]] ||
        die "--nodes=$value: give one number of nodes (a range cannot be honoured)"
      nodes=$value
      ;;
    --ntasks-per-node) positive "$name" "$value"; per_node=$value ;;
    --cpus-per-task) positive "$name" "$value"; cpus=$value ;;
    --gpus-per-task) positive "$name" "$value"; gpus_per_task=$value ;;
    --gpus) total_gpus=$(gpu_count "$name" "$value") || exit 1 ;;
    --gpus-per-node) step_gpus=$(gpu_count "$name" "$value") || exit 1 ;;
    --gres)
      case $value in
        gpu) step_gpus=1 ;;
        gpu:*) step_gpus=$(gpu_count "$name" "${value#gpu:}") || exit 1 ;;
        *) die "--gres=$value: only gpu[:TYPE]:N resources exist here" ;;
      esac
      ;;
    --label) label=1 ;;
    --kill-on-bad-exit)
      case $has$value in
        0 | 11) kill_bad=1 ;;
        10) kill_bad=0 ;;
        *) die "--kill-on-bad-exit=$value: give 0 or 1" ;;
      esac
      ;;
    --export)
      IFS=, read -r -a items <<<"$value"
      [ "${items[0]}" = ALL ] ||
        die "--export=$value cannot be honoured: a task sees the job's whole environment (ALL, and ALL,NAME=VALUE,... can be)"
      for item in "${items[@]:1}"; do
        case $item in
          *=*) exports+=("$item") ;;
          *) ;;  # NAME: exported already, with ALL
        esac
      done
      ;;
    --chdir) chdir=$value ;;
    --distribution)
      case $value in
        block | block:* | '*' | '*:'*) ;;
        *) die "--distribution=$value cannot be honoured: tasks are placed in blocks (block)" ;;
      esac
      ;;
    --mpi)
      [ "$value" = none ] ||
        die "--mpi=$value cannot be honoured: no MPI is set up; start your MPI with its own launcher or use torchrun"
      ;;
    --unbuffered | --job-name | --time | --partition | --account | --qos | --quiet | --verbose | \
      --wait | --mem | --mem-per-cpu | --mem-per-gpu | --cpu-bind | --gpu-bind | --hint | \
      --exclusive | --overlap | --exact | --overcommit) ;;  # accepted: no effect here
    --help) usage; exit 0 ;;
    --version) echo "slurm 22.05 (tide srun)"; exit 0 ;;
    --output | --error | --input)
      die "$name cannot be honoured: the tasks' output goes to the job's log (tide logs), as the script's does"
      ;;
    --nodelist | --exclude | --constraint)
      die "$name cannot be honoured: the step runs on the job's own nodes"
      ;;
    --pty) die "--pty cannot be honoured: a job has no terminal" ;;
    *) die "$name is not supported by tide's srun (srun --help, docs/slurm.md)" ;;
  esac
done
[ $# -gt 0 ] || die "no command given: srun [OPTIONS] COMMAND [ARGS...]"

# The step's nodes and tasks, as Slurm counts them.
if [ -n "$nodes" ] && [ "$nodes" -gt "$job_nodes" ]; then
  die "--nodes=$nodes: the job has $job_nodes node(s) (tide sbatch --nodes)"
fi
if [ -z "$ntasks" ]; then
  if [ -n "$per_node" ]; then
    ntasks=$((per_node * ${nodes:-$job_nodes}))
  elif [ -n "$nodes" ]; then
    ntasks=$nodes
  else
    ntasks=${SLURM_NTASKS:-$job_nodes}
  fi
fi
step_nodes=${nodes:-$job_nodes}
if [ -n "$per_node" ] && [ -z "$nodes" ]; then
  step_nodes=$(((ntasks + per_node - 1) / per_node))
  [ "$step_nodes" -le "$job_nodes" ] ||
    die "--ntasks=$ntasks with --ntasks-per-node=$per_node needs $step_nodes nodes; the job has $job_nodes"
fi
[ "$ntasks" -ge "$step_nodes" ] || step_nodes=$ntasks
if [ -n "$per_node" ] && [ "$ntasks" -gt $((per_node * step_nodes)) ]; then
  die "--ntasks=$ntasks does not fit $step_nodes node(s) with --ntasks-per-node=$per_node"
fi

# This node's share: a block of tasks.
if [ "$node" -ge "$step_nodes" ]; then
  count=0 first=0
elif [ -n "$per_node" ]; then
  first=$((node * per_node))
  count=$((ntasks - first < per_node ? ntasks - first : per_node))
else
  base=$((ntasks / step_nodes)) rem=$((ntasks % step_nodes))
  count=$((base + (node < rem ? 1 : 0)))
  first=$((node * base + (node < rem ? node : rem)))
fi

# The node's GPUs, and the step's share of them.
IFS=, read -r -a gpus <<<"${CUDA_VISIBLE_DEVICES:-}"
if [ -n "$total_gpus" ]; then
  step_gpus=$(((total_gpus + step_nodes - 1) / step_nodes))
fi
if [ -n "$step_gpus" ]; then
  [ "$step_gpus" -le "${#gpus[@]}" ] ||
    die "the step asks for $step_gpus GPUs per node; the job has ${#gpus[@]} per node (tide sbatch --gpus-per-node)"
  gpus=("${gpus[@]:0:$step_gpus}")
fi
if [ -n "$gpus_per_task" ] && [ $((gpus_per_task * count)) -gt "${#gpus[@]}" ]; then
  die "--gpus-per-task=$gpus_per_task for $count task(s) on this node needs $((gpus_per_task * count)) GPUs; the job has ${#gpus[@]} per node"
fi

run_task() {
  local procid=$1 localid=$2
  shift 2
  export SLURM_PROCID=$procid SLURM_LOCALID=$localid SLURM_NODEID=$node
  export SLURM_NTASKS=$ntasks SLURM_NPROCS=$ntasks SLURM_STEP_NUM_TASKS=$ntasks
  export SLURM_STEP_NUM_NODES=$step_nodes SLURM_NNODES=$step_nodes
  [ -z "$cpus" ] || export SLURM_CPUS_PER_TASK=$cpus
  local list
  if [ -n "$gpus_per_task" ]; then
    list=$(IFS=,; echo "${gpus[*]:$((localid * gpus_per_task)):$gpus_per_task}")
    export CUDA_VISIBLE_DEVICES=$list NVIDIA_VISIBLE_DEVICES=$list
  elif [ -n "$step_gpus" ]; then
    list=$(IFS=,; echo "${gpus[*]}")
    export CUDA_VISIBLE_DEVICES=$list NVIDIA_VISIBLE_DEVICES=$list
  fi
  local kv
  for kv in "${exports[@]}"; do export "${kv?}"; done
  if [ -n "$chdir" ]; then
    cd "$chdir" || exit 1
  fi
  if [ "$label" = 1 ]; then
    "$@" 2>&1 | while IFS= read -r line || [ -n "$line" ]; do printf '%s: %s\n' "$procid" "$line"; done
    exit "${PIPESTATUS[0]}"
  fi
  exec "$@"
}

# Each task in a process group of its own, so --kill-on-bad-exit ends all
# of it (a labelled task is a pipeline).
set -m
pids=() procids=()
for ((i = 0; i < count; i++)); do
  (run_task $((first + i)) "$i" "$@") &
  pids+=($!)
  procids+=($((first + i)))
done
set +m

where=${SLURMD_NODENAME:-node$node}
rc=0
if [ "$kill_bad" = 1 ]; then
  failed=0
  for ((left = count; left > 0; left--)); do
    wait -n
    s=$?
    [ "$s" -ne 0 ] || continue
    if [ "$failed" = 0 ]; then
      failed=1 rc=$s
      echo "srun: error: $where: a task exited with exit code $s; ending the others (--kill-on-bad-exit)" >&2
      for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
    fi
  done
else
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    s=$?
    if [ "$s" -ne 0 ]; then
      echo "srun: error: $where: task ${procids[$i]}: exited with exit code $s" >&2
      [ "$s" -le "$rc" ] || rc=$s
    fi
  done
fi
exit "$rc"
