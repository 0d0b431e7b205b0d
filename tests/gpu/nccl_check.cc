// nccl_check: exercises the NCCL communicator on a machine with a GPU (tests/gpu/run).
// One rank on GPU 0: init (non-blocking, with a timeout), every collective against the
// result one rank must give (fp32, bf16, i64), barrier, the point-to-point exchange's checks,
// an in-place shrink (ncclCommShrink, where the library has it), abort and the refusal of
// later calls, and a fresh init under a new unique id (the grow path of NCCL versions
// without ncclCommGrow); with two GPUs and NCCL 2.29+, a grow from 1 to 2 ranks with
// ncclCommGrow, each rank's sum checked against the sum of both inputs. Then a model-parallel
// group of 2 ranks as libomni makes one (runtime.cc connect_mp): Gloo ranks first, the NCCL
// unique id through BroadcastStore over them, on one GPU; two processes, since NCCL refuses
// two ranks of a communicator on one device within one host (NCCL_HOSTID tells each it is a
// host of its own, and they meet over the socket transport on lo).
// Prints one line per check; exit 0 when all pass.
#include <cuda_runtime.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/bf16.h"
#include "comm/nccl.h"
#include "runtime/mp_wireup.h"

extern char **environ;

using namespace omni::launcher;

static int failures = 0;
#define CHECK(cond, what)                                                  \
    do {                                                                   \
        const bool ok_ = (cond);                                           \
        std::printf("%s: %s\n", ok_ ? "ok" : "FAIL", what);                \
        if (!ok_) ++failures;                                              \
    } while (0)

// Copies `in` to a device buffer, runs `op(src, dst)` (dst has room for `out_count`
// elements; src == dst for in-place calls when out_count is 0) and returns dst's contents.
// A failed call or CUDA error is printed and returns an empty vector, which no check expects.
template <typename T, typename Op>
std::vector<T> on_device(const std::vector<T> &in, std::size_t out_count, Op op) {
    void *src = nullptr, *dst = nullptr;
    const std::size_t out_n = out_count ? out_count : in.size();
    bool ok = cudaMalloc(&src, in.size() * sizeof(T)) == cudaSuccess &&
              cudaMemcpy(src, in.data(), in.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess;
    if (ok && out_count) ok = cudaMalloc(&dst, out_n * sizeof(T)) == cudaSuccess;
    if (!out_count) dst = src;
    std::vector<T> out;
    if (ok) {
        auto st = op(src, dst);
        if (!st) std::printf("  %s\n", st.error().c_str());
        out.resize(out_n);
        if (!st || cudaMemcpy(out.data(), dst, out_n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
            out.clear();
    } else {
        std::printf("  CUDA: %s\n", cudaGetErrorString(cudaGetLastError()));
    }
    if (dst != src) cudaFree(dst);
    cudaFree(src);
    return out;
}

template <typename T>
std::vector<T> roundtrip(Communicator &c, const std::vector<T> &in, DType t, ReduceOp op = ReduceOp::sum) {
    return on_device(in, 0, [&](void *buf, void *) { return c.allreduce(buf, in.size(), t, op); });
}

// One rank of the MP check (nccl_check --mp-rank R DIR): Gloo through a file store in DIR,
// then NCCL as connect_mp builds it; its allreduce of f must give 2f. Exit 0 when it does.
int mp_rank_main(int rank, const char *dir) {
    const std::vector<float> f{1.5f, -2.0f, 3.25f}, twice{3.0f, -4.0f, 6.5f};
    std::unique_ptr<gloo::rendezvous::FileStore> files;
    try {
        files = std::make_unique<gloo::rendezvous::FileStore>(dir);
    } catch (const std::exception &e) {
        std::printf("FAIL: MP rank %d: the file store in %s: %s\n", rank, dir, e.what());
        return 1;
    }
    auto g = make_gloo_communicator(*files, rank, 2, GlooOptions{});
    if (!g) {
        std::printf("FAIL: MP rank %d: Gloo: %s\n", rank, g.error().c_str());
        return 1;
    }
    BroadcastStore bs(*g.value(), 4096);
    auto n = make_nccl_communicator(bs, "mp-nccl-unique-id", rank, 2, NcclOptions{});
    if (!n) {
        std::printf("FAIL: MP rank %d: NCCL: %s\n", rank, n.error().c_str());
        return 1;
    }
    const bool ok = roundtrip(*n.value(), f, DType::fp32) == twice;
    std::printf("%s: MP rank %d of 2: allreduce fp32 sum over the group\n", ok ? "ok" : "FAIL", rank);
    return ok ? 0 : 1;
}

// Starts this program twice as the MP check's ranks and waits for both.
bool run_mp_group(const char *self) {
    char dir[] = "/tmp/nccl-check-mp.XXXXXX";
    if (!mkdtemp(dir)) return false;
    std::vector<std::string> base;
    for (char **e = environ; *e; ++e)
        if (std::strncmp(*e, "NCCL_HOSTID=", 12) != 0) base.emplace_back(*e);
    if (!getenv("NCCL_SOCKET_IFNAME")) base.emplace_back("NCCL_SOCKET_IFNAME=lo");
    if (!getenv("NCCL_IB_DISABLE")) base.emplace_back("NCCL_IB_DISABLE=1");
    pid_t pids[2] = {-1, -1};
    for (int r = 0; r < 2; ++r) {
        std::vector<std::string> env = base;
        env.push_back("NCCL_HOSTID=omni-mp-check-" + std::to_string(r));
        std::vector<char *> envp, argv;
        for (auto &e : env) envp.push_back(e.data());
        envp.push_back(nullptr);
        std::string rank = std::to_string(r), flag = "--mp-rank", prog = self;
        argv = {prog.data(), flag.data(), rank.data(), dir, nullptr};
        if (posix_spawn(&pids[r], self, nullptr, nullptr, argv.data(), envp.data()) != 0) pids[r] = -1;
    }
    bool ok = true;
    for (pid_t p : pids) {
        int status = 0;
        ok = ok && p > 0 && waitpid(p, &status, 0) == p && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) std::printf("nccl_check: could not remove %s: %s\n", dir, ec.message().c_str());
    return ok;
}

int main(int argc, char **argv) {
    if (argc == 4 && std::strcmp(argv[1], "--mp-rank") == 0) return mp_rank_main(std::atoi(argv[2]), argv[3]);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
        std::printf("nccl_check: no CUDA device\n");
        return 2;
    }
    std::printf("nccl_check: NCCL built %d, running %d; ncclCommShrink %s, ncclCommGrow %s\n",
                nccl_build_version(), nccl_runtime_version(), nccl_has_shrink() ? "yes" : "no",
                nccl_has_grow() ? "yes" : "no");
    {
        auto v = check_runtime_version();
        CHECK(v.ok(), v.ok() ? "the NCCL loaded can serve this build" : v.error().c_str());
    }
    gloo::rendezvous::HashStore store;
    NcclOptions o;
    auto c = make_nccl_communicator(store, "gen0/nccl-id", 0, 1, o);
    CHECK(c.ok(), c.ok() ? "init 1 rank" : c.error().c_str());
    if (!c) return 1;
    // With one rank every collective's result is its input, known here before any call:
    // the sum and mean of one value, a broadcast from rank 0, the gather of one slice, the
    // scatter of one. Values are chosen so that a conversion would show: fp32 and bf16 with
    // a fraction and a sign, i64 beyond 2^53 (lost by any float path).
    Communicator &cc = *c.value();
    const std::vector<float> f{1.5f, -2.0f, 3.25f};
    CHECK(roundtrip(cc, f, DType::fp32) == f, "allreduce fp32 sum (1 rank: identity)");
    CHECK(roundtrip(cc, f, DType::fp32, ReduceOp::avg) == f, "allreduce fp32 avg");
    const std::vector<std::uint16_t> h{float_to_bf16(1.0f), float_to_bf16(-3.0f)};
    CHECK(roundtrip(cc, h, DType::bf16) == h, "allreduce bf16 sum");
    const std::vector<std::int64_t> big{(std::int64_t(1) << 60) + 1, -((std::int64_t(1) << 55) + 3)};
    CHECK(roundtrip(cc, big, DType::i64) == big, "allreduce i64 sum, values beyond 2^53");
    CHECK(on_device(f, 0, [&](void *b, void *) { return cc.broadcast(b, f.size(), DType::fp32, 0); }) == f,
          "broadcast from rank 0");
    CHECK(!cc.broadcast(nullptr, 1, DType::fp32, 1).ok(), "broadcast refuses root 1 of 1 rank");
    CHECK(on_device(f, f.size(), [&](void *src, void *dst) { return cc.allgather(src, dst, f.size(), DType::fp32); }) == f,
          "allgather (1 rank: its own slice)");
    CHECK(on_device(f, f.size(),
                    [&](void *src, void *dst) { return cc.reduce_scatter(src, dst, f.size(), DType::fp32, ReduceOp::sum); }) == f,
          "reduce_scatter (1 rank: its own slice)");
    CHECK(cc.barrier().ok(), "barrier");
    CHECK(cc.barrier().ok(), "barrier again (its scratch word reused)");
    // Point-to-point (the hand-off): with one rank only an empty exchange is valid.
    CHECK(c.value()->exchange({}, {}).ok(), "exchange with nothing to move");
    {
        void *d = nullptr;
        cudaMalloc(&d, 16);
        CHECK(!c.value()->exchange({{0, d, 16}}, {}).ok(), "exchange refuses a send to itself");
        cudaFree(d);
    }

    auto *nc = dynamic_cast<NcclCommunicator *>(c.value().get());
    {
        // The trainer's stream (omni_set_cuda_stream): a value written there by a copy queued
        // before the collective is what the collective reduces.
        cudaStream_t user = nullptr;
        cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking);
        nc->use_stream(user);
        float *d = nullptr;
        const float host = 42.0f;
        cudaMalloc(&d, sizeof(float));
        cudaMemcpyAsync(d, &host, sizeof host, cudaMemcpyHostToDevice, user);
        auto st = nc->allreduce(d, 1, DType::fp32, ReduceOp::sum);
        float back = 0;
        cudaMemcpy(&back, d, sizeof back, cudaMemcpyDeviceToHost);
        CHECK(st.ok() && back == host, st.ok() ? "allreduce on the trainer's stream" : st.error().c_str());
        nc->use_stream(nullptr);
        cudaFree(d);
        cudaStreamDestroy(user);
    }
    if (nccl_has_shrink()) {
        auto s = nc->shrink({}, false);
        CHECK(s.ok(), s.ok() ? "shrink (exclude none)" : s.error().c_str());
        if (s) CHECK(roundtrip(*s.value(), f, DType::fp32) == f, "allreduce after shrink");
        // The parent gave its NCCL handle to the shrunk communicator: it refuses calls.
        CHECK(roundtrip(*nc, f, DType::fp32).empty(), "the parent refuses calls after shrink");
        if (s) {
            auto *sc = dynamic_cast<NcclCommunicator *>(s.value().get());
            sc->abort();
            auto st = sc->allreduce(nullptr, 1, DType::fp32, ReduceOp::sum);
            CHECK(!st.ok() && st.error().find("aborted") != std::string::npos,
                  st.ok() ? "allreduce after abort was accepted" : "abort: later calls are refused");
        }
    } else {
        auto s = nc->shrink({}, false);
        CHECK(!s.ok(), "shrink refused without ncclCommShrink");
        nc->abort();
        auto st = nc->barrier();
        CHECK(!st.ok() && st.error().find("aborted") != std::string::npos,
              st.ok() ? "barrier after abort was accepted" : "abort: later calls are refused");
    }
    auto again = make_nccl_communicator(store, "gen1/nccl-id", 0, 1, o);
    CHECK(again.ok(), again.ok() ? "fresh init under a new unique id (regrow)" : again.error().c_str());
    if (again) CHECK(roundtrip(*again.value(), f, DType::fp32) == f, "allreduce after regrow");
    // Grow 1 -> 2 ranks (ncclCommGrow, NCCL 2.29+): the existing rank on GPU 0 grows its
    // communicator, a joiner on GPU 1 joins with the id rank 0 published. NCCL refuses two
    // ranks of one communicator on one GPU, so this needs two.
    if (devices < 2 || !nccl_has_grow()) {
        std::printf("skip: grow 1 -> 2 ranks (needs 2 GPUs and ncclCommGrow; have %d GPU(s), ncclCommGrow %s)\n",
                    devices, nccl_has_grow() ? "yes" : "no");
    } else if (again) {
        std::string joiner_error;
        std::vector<float> joined;
        std::thread joiner([&] {
            NcclOptions o1;
            o1.device = 1;
            auto j = make_nccl_communicator(store, "gen2/nccl-id", 1, 2, o1);
            if (!j) return void(joiner_error = j.error());
            joined = roundtrip(*j.value(), f, DType::fp32);
        });
        auto grown = make_nccl_communicator(store, "gen2/nccl-id", 0, 2, o, again.value().get());
        CHECK(grown.ok(), grown.ok() ? "grow 1 -> 2 ranks from the existing communicator" : grown.error().c_str());
        std::vector<float> twice{3.0f, -4.0f, 6.5f};
        if (grown) CHECK(roundtrip(*grown.value(), f, DType::fp32) == twice, "allreduce after grow (rank 0)");
        joiner.join();
        CHECK(joiner_error.empty() && joined == twice,
              joiner_error.empty() ? "allreduce after grow (the joiner)" : joiner_error.c_str());
    }
    CHECK(run_mp_group("/proc/self/exe"),
          "an MP group of 2 ranks on one GPU: Gloo, the unique id over BroadcastStore, NCCL");
    std::printf("nccl_check: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
