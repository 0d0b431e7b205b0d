// index_bench: what a checkpoint's number of slices costs, apart from its bytes. A job with
// thousands of tensors, each split over hundreds of ranks, has an index of a few hundred
// thousand slices: every rank opens it to load, commit writes it, omni-ckpt ls/show/verify
// read it. Writes one checkpoint of W writers x T tensors of 64-byte slices (ranks as threads
// of this process), then measures, side by side in one run:
//
//   commit (index.h5: the manifest and one virtual dataset per tensor)
//   Reader::open in a fresh process  vs  a raw read of the same index.h5 (page cache)
//
// and the open's growth in resident memory. Prints per-slice costs; it does not pass or fail.
#include <boost/program_options.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/fsio.h"
#include "common/parse.h"
#include "omni/ckpt_cpp.h"

namespace po = boost::program_options;
using namespace omni::ckpt;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string &msg) {
    std::fprintf(stderr, "index_bench: %s\n", msg.c_str());
    std::exit(1);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

long status_kb(const char *field) {
    FILE *f = std::fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long v = 0;
    const std::size_t n = std::strlen(field);
    while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, field, n) == 0) v = std::strtol(line + n + 1, nullptr, 10);
    std::fclose(f);
    return v;
}

// W writers (on `threads` threads), each holding rows [16k, 16k+16) of every tensor.
void write_shards(const std::string &root, std::uint32_t writers, std::uint32_t tensors, std::uint32_t threads) {
    const std::uint64_t rows = 16;
    const std::vector<float> data(rows, 1.0f);
    std::atomic<std::uint32_t> next{0};
    std::vector<std::string> errors(writers);
    std::vector<std::thread> pool;
    for (std::uint32_t t = 0; t < threads; ++t)
        pool.emplace_back([&] {
            for (std::uint32_t k; (k = next++) < writers;) {
                auto w = ShardWriter::open(root, 1, k);
                if (!w) return void(errors[k] = w.error());
                for (std::uint32_t i = 0; i < tensors; ++i) {
                    auto st = w.value()->add_tensor("layer" + std::to_string(i / 4) + "/w" + std::to_string(i % 4),
                                                    DType::fp32, {rows * writers}, {rows * k}, {rows}, data.data(),
                                                    Change::changed);
                    if (!st) return void(errors[k] = st.error());
                }
                if (auto st = w.value()->finish(); !st) errors[k] = st.error();
            }
        });
    for (auto &t : pool) t.join();
    for (const auto &e : errors)
        if (!e.empty()) die(e);
}

// The child's side of open_in_child: Reader::open of `ckpt`, then "SECONDS KIB" on stdout.
int open_and_report(const std::string &ckpt) {
    const long before = status_kb("VmRSS:");
    const auto t0 = Clock::now();
    auto r = Reader::open(ckpt);
    const double s = seconds_since(t0);
    if (!r) die(r.error());
    std::printf("%.6f %ld\n", s, status_kb("VmRSS:") - before);
    return 0;
}

// Reader::open of `ckpt` in a new process (this program run again with --open, so nothing
// of this process is cached or reused): seconds, and the growth of its resident memory in KiB.
std::pair<double, long> open_in_child(const std::string &ckpt) {
    int fds[2];
    if (::pipe(fds) != 0) die("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) die("fork failed");
    if (pid == 0) {
        ::close(fds[0]);
        if (::dup2(fds[1], STDOUT_FILENO) < 0) ::_exit(1);
        const char *args[] = {"index_bench", "--open", ckpt.c_str(), nullptr};
        ::execv("/proc/self/exe", const_cast<char *const *>(args));
        ::_exit(127);
    }
    ::close(fds[1]);
    char buf[64] = {};
    const ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    double s = 0;
    long grew = 0;
    if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || std::sscanf(buf, "%lf %ld", &s, &grew) != 2)
        die("Reader::open of " + ckpt + " in a new process failed");
    return {s, grew};
}

}  // namespace

int main(int argc, char **argv) {
    std::string dir, writers_s = "512", tensors_s = "400",
                threads_s = std::to_string(std::max(1u, std::thread::hardware_concurrency()));
    po::options_description opts(
        "Usage: index_bench [OPTIONS]\nCommit and open a checkpoint of many small slices; prints "
        "per-slice costs.\n\nOptions");
    opts.add_options()("help,h", "show this help")(
        "dir", po::value<std::string>(&dir), "directory to write in (default: a new one under /tmp)")(
        "writers", po::value<std::string>(&writers_s), "writers W (default 512)")(
        "tensors", po::value<std::string>(&tensors_s), "tensors T, each split over the W writers (default 400)")(
        "threads", po::value<std::string>(&threads_s), "threads running the writers (default: number of cores)");
    std::string open_only;
    po::options_description hidden;
    hidden.add_options()("open", po::value<std::string>(&open_only), "");   // the child of open_in_child
    po::options_description all;
    all.add(opts).add(hidden);
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, all), vm);
        po::notify(vm);
    } catch (const po::error &e) {
        std::fprintf(stderr, "index_bench: %s\nTry 'index_bench --help'.\n", e.what());
        return 2;
    }
    if (vm.count("help")) {
        std::cout << opts << "\nExit status: 0 success, 1 failure, 2 bad usage.\n";
        return 0;
    }
    if (!open_only.empty()) return open_and_report(open_only);
    auto w = omni::parse_uint(writers_s, 1, 4096, "--writers");
    auto t = omni::parse_uint(tensors_s, 1, 100000, "--tensors");
    auto th = omni::parse_uint(threads_s, 1, 1024, "--threads");
    for (const auto *r : {&w, &t, &th})
        if (!r->ok()) {
            std::fprintf(stderr, "index_bench: %s\nTry 'index_bench --help'.\n", r->error().c_str());
            return 2;
        }
    const auto writers = static_cast<std::uint32_t>(w.value()), tensors = static_cast<std::uint32_t>(t.value());
    bool own_dir = false;
    if (dir.empty()) {
        char tmpl[] = "/tmp/omni-index-bench.XXXXXX";
        if (!::mkdtemp(tmpl)) die("mkdtemp failed");
        dir = tmpl;
        own_dir = true;
    }
    const std::string root = omni::ckpt::fsio::join(dir, "root");
    const std::uint64_t slices = std::uint64_t(writers) * tensors;
    std::printf("index_bench: %u writers x %u tensors = %llu slices in %s, %s threads\n", writers, tensors,
                static_cast<unsigned long long>(slices), dir.c_str(), threads_s.c_str());

    auto t0 = Clock::now();
    write_shards(root, writers, tensors, static_cast<std::uint32_t>(th.value()));
    const double t_write = seconds_since(t0);
    Meta meta;
    meta.step = 1;
    meta.world_size = writers;
    t0 = Clock::now();
    auto ck = commit(root, writers, meta);
    if (!ck) die(ck.error());
    const double t_commit = seconds_since(t0);
    const std::string index = omni::ckpt::fsio::join(ck.value(), "index.h5");
    // Once untimed, so both sides read from the page cache.
    (void)open_in_child(ck.value());
    t0 = Clock::now();
    auto bytes = omni::ckpt::fsio::read_file(index, std::uint64_t(1) << 34);
    if (!bytes) die(bytes.error());
    const double t_raw = seconds_since(t0);
    const auto [t_open, grew_kb] = open_in_child(ck.value());

    const double us = 1e6 / static_cast<double>(slices);
    std::printf("\n  writers (HDF5 shard files)           %8.3f s\n", t_write);
    std::printf("  commit                               %8.3f s  %6.2f us per slice\n", t_commit, t_commit * us);
    std::printf("  raw read of index.h5 (%6.1f MiB)    %8.3f s\n", bytes.value().size() / 1048576.0, t_raw);
    std::printf("  Reader::open, new process            %8.3f s  %6.2f us per slice, +%.1f MiB resident\n", t_open,
                t_open * us, grew_kb / 1024.0);
    std::printf("\nratios:\n  Reader::open / raw read of the index  %6.1fx\n", t_open / t_raw);
    if (own_dir)
        if (auto st = omni::ckpt::fsio::remove_tree(dir); !st) die(st.error());
    return 0;
}
