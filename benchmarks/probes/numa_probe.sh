# Probe: is the 1 MiB collective figure of a C NCCL loop (nccl-tests' method) stable from one
# process start to the next, and does the launching thread's CPU decide it?
export PYTHONPATH=$PWD
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
nvcc -O2 -o /tmp/cref benchmarks/c_reference.cu -I$N/include -L$N/lib -lnccl -Xlinker -rpath=$N/lib
for cpus in all 0 7 16 0-3 0-15; do
  pre=""; [ "$cpus" = all ] || pre="taskset -c $cpus"
  for r in 1 2 3 4 5; do echo "cpus $cpus: $($pre /tmp/cref nccl group 1)"; done
done
for r in 1 2 3; do echo "procs: $(/tmp/cref nccl procs 1)"; done
