// The reference tools' methods written in C, run beside the Python measurement in the
// same call (the machine has nvcc and NCCL's header, but neither nccl-tests nor cuda-samples).
// Written for this project from the tools' documented methods; not their code.
//
//   nvcc -O2 -o /tmp/cref benchmarks/c_reference.cu -I$NCCL/include -L$NCCL/lib -lnccl
//   /tmp/cref latency [peered] P2P=Disabled (with peered: Enabled) latency, 100 x 16-byte
//                              cudaMemcpyPeerAsync behind a flag-released spin kernel
//                              (p2pBandwidthLatencyTest's method), 5 rounds
//   /tmp/cref nccl group       collectives from one thread driving both GPUs (nccl-tests -g 2)
//   /tmp/cref nccl procs       one process per GPU (mpirun -np 2 ... -g 1), mean of the ranks
//   (a third argument K: only the first K sizes of 1, 2, 4, 8, 16, 64 MiB)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <algorithm>
#include <vector>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define NK(x) do { ncclResult_t r = (x); if (r != ncclSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r)); exit(1); } } while (0)

__global__ void gate(volatile int *flag, long long limit) {
  long long t0 = clock64();
  while (!*flag && clock64() - t0 < limit) {}
}

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static int latency(bool peered) {
  int *flag;
  CK(cudaHostAlloc((void **)&flag, sizeof(int), cudaHostAllocPortable));
  void *buf[2];
  cudaStream_t s[2];
  cudaEvent_t a[2], b[2];
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&buf[d], 16));
    CK(cudaMemset(buf[d], 0, 16));
    CK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
    CK(cudaEventCreate(&a[d]));
    CK(cudaEventCreate(&b[d]));
  }
  if (peered) {
    for (int d = 0; d < 2; d++) {
      CK(cudaSetDevice(d));
      CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    }
  }
  for (int round = 0; round < 5; round++) {
    for (int i = 0; i < 2; i++) {
      int j = 1 - i;
      CK(cudaSetDevice(i));
      CK(cudaStreamSynchronize(s[i]));
      *(volatile int *)flag = 0;
      gate<<<1, 1, 0, s[i]>>>(flag, 10000000LL);
      CK(cudaEventRecord(a[i], s[i]));
      double t = now();
      for (int r = 0; r < 100; r++)
        CK(cudaMemcpyPeerAsync(buf[j], j, buf[i], i, 16, s[i]));
      double host = (now() - t) / 100 * 1e6;
      CK(cudaEventRecord(b[i], s[i]));
      *(volatile int *)flag = 1;
      CK(cudaStreamSynchronize(s[i]));
      float ms;
      CK(cudaEventElapsedTime(&ms, a[i], b[i]));
      printf("cref latency %s round %d %d->%d gpu %.2f us host %.2f us\n",
             peered ? "enabled" : "disabled", round, i, j,
             ms * 1e3 / 100, host);
    }
  }
  return 0;
}

// out of place as nccl-tests' first columns, then all_reduce and broadcast in place
enum { AR, BC, RS, AG, AR_IN, BC_IN, NCOLL };
static const char *names[] = {"all_reduce", "broadcast", "reduce_scatter", "all_gather",
                              "all_reduce_inplace", "broadcast_inplace"};

static void launch(int c, void *send, void *recv, size_t count, int n, ncclComm_t comm,
                   cudaStream_t st) {
  switch (c) {
    case AR: NK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, st)); break;
    case BC: NK(ncclBroadcast(send, recv, count, ncclFloat, 0, comm, st)); break;
    case RS: NK(ncclReduceScatter(send, recv, count / n, ncclFloat, ncclSum, comm, st)); break;
    case AG: NK(ncclAllGather(send, recv, count / n, ncclFloat, comm, st)); break;
    case AR_IN: NK(ncclAllReduce(send, send, count, ncclFloat, ncclSum, comm, st)); break;
    case BC_IN: NK(ncclBroadcast(send, send, count, ncclFloat, 0, comm, st)); break;
  }
}

static double factor(int c, int n) {
  return (c == AR || c == AR_IN) ? 2.0 * (n - 1) / n : (c == BC || c == BC_IN) ? 1.0
                                                                           : double(n - 1) / n;
}

static const size_t sizes[] = {1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20};

static int nsizes = 6;

// One thread, both GPUs: every call is ncclGroupStart, one call per GPU, ncclGroupEnd.
static int nccl_group() {
  const int n = 2;
  int devs[n] = {0, 1};
  ncclComm_t comm[n];
  NK(ncclCommInitAll(comm, n, devs));
  void *send[n], *recv[n];
  cudaStream_t st[n];
  size_t maxb = 64 << 20;
  for (int d = 0; d < n; d++) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&send[d], maxb));
    CK(cudaMalloc(&recv[d], maxb));
    CK(cudaMemset(send[d], 0, maxb));
    CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
  }
  for (int k = 0; k < nsizes; k++) {
    size_t bytes = sizes[k];
    size_t count = bytes / 4;
    printf("cref nccl group %5zu MiB busbw", bytes >> 20);
    for (int c = 0; c < NCOLL; c++) {
      auto call = [&]() {
        NK(ncclGroupStart());
        for (int d = 0; d < n; d++) launch(c, send[d], recv[d], count, n, comm[d], st[d]);
        NK(ncclGroupEnd());
      };
      for (int w = 0; w < 5; w++) call();
      std::vector<double> t;
      for (int rep = 0; rep < 5; rep++) {
        for (int d = 0; d < n; d++) CK(cudaStreamSynchronize(st[d]));
        double t0 = now();
        for (int it = 0; it < 20; it++) call();
        for (int d = 0; d < n; d++) CK(cudaStreamSynchronize(st[d]));
        t.push_back((now() - t0) / 20);
      }
      std::sort(t.begin(), t.end());
      printf("  %s %.1f", names[c], bytes / t[2] / 1e9 * factor(c, n));
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}

// One process per GPU (fork), the unique id and the ranks' times in shared memory.
struct Shared { ncclUniqueId id; volatile int ready; double t[2][NCOLL][5]; };

static int nccl_procs() {
  const int n = 2;
  Shared *sh = (Shared *)mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  for (int k = 0; k < nsizes; k++) {
    size_t bytes = sizes[k];
    sh->ready = 0;
    pid_t pid[n];
    for (int rank = 0; rank < n; rank++) {
      pid[rank] = fork();
      if (pid[rank] == 0) {
        // the parent never touches CUDA or NCCL (a forked CUDA context is unusable): rank 0
        // makes the id
        if (rank == 0) { NK(ncclGetUniqueId(&sh->id)); __sync_synchronize(); sh->ready = 1; }
        while (!sh->ready) usleep(100);
        CK(cudaSetDevice(rank));
        ncclComm_t comm;
        NK(ncclCommInitRank(&comm, n, sh->id, rank));
        void *send, *recv;
        float *one;
        cudaStream_t st;
        CK(cudaMalloc(&send, bytes));
        CK(cudaMalloc(&recv, bytes));
        CK(cudaMalloc(&one, 4));
        CK(cudaMemset(send, 0, bytes));
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        size_t count = bytes / 4;
        auto barrier = [&]() {
          NK(ncclAllReduce(one, one, 1, ncclFloat, ncclSum, comm, st));
          CK(cudaStreamSynchronize(st));
        };
        for (int c = 0; c < NCOLL; c++) {
          for (int w = 0; w < 5; w++) launch(c, send, recv, count, n, comm, st);
          for (int rep = 0; rep < 5; rep++) {
            barrier();
            double t0 = now();
            for (int it = 0; it < 20; it++) launch(c, send, recv, count, n, comm, st);
            CK(cudaStreamSynchronize(st));
            sh->t[rank][c][rep] = (now() - t0) / 20;
          }
        }
        ncclCommDestroy(comm);
        _exit(0);
      }
    }
    for (int rank = 0; rank < n; rank++) waitpid(pid[rank], nullptr, 0);
    printf("cref nccl procs %5zu MiB busbw", bytes >> 20);
    for (int c = 0; c < NCOLL; c++) {
      std::vector<double> mean;
      for (int rep = 0; rep < 5; rep++) mean.push_back((sh->t[0][c][rep] + sh->t[1][c][rep]) / 2);
      std::sort(mean.begin(), mean.end());
      printf("  %s %.1f", names[c], bytes / mean[2] / 1e9 * factor(c, n));
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 3) nsizes = std::min(6, atoi(argv[3]));
  if (argc > 1 && !strcmp(argv[1], "latency"))
    return latency(argc > 2 && !strcmp(argv[2], "peered"));
  if (argc > 2 && !strcmp(argv[1], "nccl") && !strcmp(argv[2], "group")) return nccl_group();
  if (argc > 2 && !strcmp(argv[1], "nccl") && !strcmp(argv[2], "procs")) return nccl_procs();
  fprintf(stderr, "usage: cref latency [peered] | nccl group|procs [K]\n");
  return 2;
}
