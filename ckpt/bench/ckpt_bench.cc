// ckpt_bench: libomni-ckpt against raw POSIX I/O of the same bytes, side by side in one run
// on one file system. Reports ratios; it does not pass or fail.
//
//   raw write (write + fsync of K files)   vs  our save as K shards (HDF5, checksums, commit)
//   raw read of those files                vs  our load at the saved layout, and resharded
//                                              (with the bytes the resharding ranks read)
//   raw pread of the rows each resharding  vs  our reshard load: what the access pattern
//   rank takes, from the same places           costs whoever reads
//
// Both sides run at the same parallelism: our K writing (or M loading) ranks run concurrently
// on --threads threads (default: the number of cores), each rank with its own ShardWriter or
// Reader, as the ranks of a job sharing these cores would; the raw write and read run the
// same K files, one per rank, on the same threads (each rank its own write + fsync, or its
// own read), the best a hand-written parallel dump does on this machine.
//   full save                              vs  incremental save with 1% of the slices changed:
//                                              detected by hashing every slice, told by the
//                                              caller, or detected with write tracking (the
//                                              kernel says which slices were written since the
//                                              last checkpoint; only those are hashed)
//   sync save                              vs  async stall, both snapshot modes: copy (a
//                                              memcpy into host memory) and copy-on-write
//                                              (write-protecting the model's buffers)
//   async stall, copy                      vs  plain memcpy of the same slices by the same
//                                              threads into memory already faulted in: what
//                                              the simplest copy snapshot costs on this
//                                              machine, its memory bandwidth
//   copy-on-write stall, 4 KiB pages       vs  the same bytes in transparent huge pages (one
//                                              rank, tensors of 8 MiB on 2 MiB boundaries),
//                                              last and apart from the rest: khugepaged works
//                                              on a huge-page model while it is mapped
//   trainer rewriting all its buffers      idle, while a copy persist runs, and while a
//                                              copy-on-write persist runs: the copy COW
//                                              moves out of the stall runs beside it (and a
//                                              write that gets ahead of it stops)
//
// Each measurement is repeated --reps times and the median is reported, with the range
// (min..max) beside it. Page-cache pages of the files are dropped (fdatasync +
// POSIX_FADV_DONTNEED) before every read, raw and ours alike, so reads come from the device
// as far as the kernel allows; the output says so. Under a hypervisor the "device" may be the
// host's page cache: hence the untimed first read of both sides and the alternating order.
// The asynchronous writers each make one untimed checkpoint before the timed ones: a writer
// reuses its snapshot memory, so only a job's first snapshot pays for faulting it in (that
// first stall is printed on a line of its own).
//
// The ranks are threads of this one process, so what the library shares within a process
// is shared here too, as in a single-controller trainer writing all its shards from one
// process: the parsed index of a checkpoint (every Reader), the shards this process wrote of
// a base (every incremental ShardWriter) and the manifests that finished ShardWriters hand
// to commit(). The output says so.
// The full save and the hinted incremental are measured a second time with the ranks as
// processes, as omni-launch runs them: the commit reads every shard's manifest from its file,
// and each rank finds its slices of the base in the shard it wrote of it (as a long-lived
// rank process of a job does; a rank that did not write the base reads the base's index).
#include <boost/program_options.hpp>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/fsio.h"
#include "ckpt/hash.h"
#include "ckpt/test/test_util.h"
#include "common/parse.h"
#include "omni/ckpt_cpp.h"

namespace po = boost::program_options;
using namespace omni::ckpt;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
    std::string dir;
    std::uint64_t bytes = 0;
    std::uint32_t shards = 8;
    std::uint32_t tensors = 25;   // logical tensors, each split into `shards` row slices
    std::uint32_t reshard_to = 5;
    int reps = 3;
    std::uint32_t threads = 2;
};

// Runs fn(0..n-1) on `threads` threads: the ranks of a job share this machine's cores, so
// more threads than cores would only measure the scheduler.
void parallel_for(std::uint32_t n, std::uint32_t threads, const std::function<void(std::uint32_t)> &fn) {
    std::atomic<std::uint32_t> next{0};
    std::vector<std::thread> pool;
    for (std::uint32_t t = 0; t < std::min(n, threads); ++t)
        pool.emplace_back([&] {
            for (std::uint32_t i; (i = next++) < n;) fn(i);
        });
    for (auto &th : pool) th.join();
}

// The run's peak resident memory per byte of checkpoint: 5.9x measured at 512, 1024 and
// 2048 MiB (`/usr/bin/time -v`), rounded up. The models, the trainer's live and tracked
// copies, the async writers' snapshot memory and the huge-page phase's model are its parts.
constexpr double kPeakPerByte = 6.0;

// MemAvailable from /proc/meminfo in bytes, or 0 where it cannot be read.
std::uint64_t mem_available() {
    std::FILE *f = std::fopen("/proc/meminfo", "re");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    std::fclose(f);
    return static_cast<std::uint64_t>(kib) << 10;
}

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

std::string range(const std::vector<double> &v, int digits = 3) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "(%.*f..%.*f)", digits, *std::min_element(v.begin(), v.end()), digits,
                  *std::max_element(v.begin(), v.end()));
    return buf;
}

[[noreturn]] void die(const std::string &msg) {
    std::fprintf(stderr, "ckpt_bench: %s\n", msg.c_str());
    std::exit(1);
}

void check(const omni::Status &st) {
    if (!st) die(st.error());
}

// The model: `tensors` logical fp32 tensors of shape [rows * shards, cols]; shard k holds rows
// [k*rows, (k+1)*rows) of every tensor.
struct Model {
    std::uint64_t rows, cols;
    std::vector<std::vector<std::vector<float>>> slice;   // [shard][tensor]
    // A model that differs from `base` in a few slices holds only those (derive()); the others
    // are empty here and read from the base. What ranks save goes through data().
    const Model *base = nullptr;
    Shape shape() const { return {rows * slice.size(), cols}; }
    std::uint64_t slice_bytes() const { return rows * cols * 4; }
    const float *data(std::size_t k, std::size_t t) const {
        return slice[k][t].empty() && base ? base->data(k, t) : slice[k][t].data();
    }
    // A model equal to this one but in the slices `which` marks, which it holds as copies to
    // be changed: 1% of the memory of a full copy.
    Model derive(const std::vector<std::vector<bool>> &which) const {
        Model d;
        d.rows = rows;
        d.cols = cols;
        d.base = this;
        d.slice.resize(slice.size());
        for (std::size_t k = 0; k < slice.size(); ++k) {
            d.slice[k].resize(slice[k].size());
            for (std::size_t t = 0; t < slice[k].size(); ++t)
                if (which[k][t]) d.slice[k][t] = slice[k][t];
        }
        return d;
    }
};

Model make_model(const Config &c) {
    Model m;
    m.cols = 1024;
    const std::uint64_t per_slice = c.bytes / (std::uint64_t(c.shards) * c.tensors);
    m.rows = std::max<std::uint64_t>(1, per_slice / (m.cols * 4));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    m.slice.resize(c.shards);
    for (auto &s : m.slice) {
        s.resize(c.tensors);
        for (auto &t : s) {
            t.resize(m.rows * m.cols);
            for (auto &x : t) x = dist(rng);
        }
    }
    return m;
}

std::string tensor_name(std::uint32_t t) { return "model/layer" + std::to_string(t) + "/w"; }

void drop_dir_cache(const std::string &dir) {
    auto names = fsio::list_dir(dir);
    if (!names) return;
    for (const auto &n : names.value()) fsio::drop_cache(fsio::join(dir, n));
}

double raw_write(const Config &c, const Model &m, const std::string &dir) {
    check(fsio::make_dirs(dir));
    const auto t0 = Clock::now();
    parallel_for(c.shards, c.threads, [&](std::uint32_t k) {
        const std::string p = fsio::join(dir, "raw-" + std::to_string(k));
        const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) die("open " + p + ": " + std::strerror(errno));
        for (const auto &t : m.slice[k]) {
            const char *b = reinterpret_cast<const char *>(t.data());
            std::size_t left = t.size() * 4;
            while (left) {
                const ssize_t n = ::write(fd, b, left);
                if (n < 0) die("write " + p + ": " + std::strerror(errno));
                b += n;
                left -= static_cast<std::size_t>(n);
            }
        }
        if (::fsync(fd) != 0) die("fsync " + p + ": " + std::strerror(errno));
        ::close(fd);
    });
    check(fsio::fsync_path(dir));
    return seconds_since(t0);
}

// Both read paths land the bytes in `dest`, a pre-faulted buffer the size of the model laid
// out tensor by tensor, as a loader fills the model's own tensors: reading into one small,
// cache-resident buffer would flatter whichever side did it.
double raw_read(const Config &c, const Model &m, const std::string &dir, std::vector<char> &dest) {
    drop_dir_cache(dir);
    const std::uint64_t tensor_bytes = m.slice_bytes() * c.shards;
    const auto t0 = Clock::now();
    parallel_for(c.shards, c.threads, [&](std::uint32_t k) {
        const std::string p = fsio::join(dir, "raw-" + std::to_string(k));
        const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) die("open " + p);
        for (std::uint32_t t = 0; t < c.tensors; ++t) {
            char *b = dest.data() + t * tensor_bytes + k * m.slice_bytes();
            std::size_t left = m.slice_bytes();
            while (left) {
                const ssize_t n = ::read(fd, b, left);
                if (n <= 0) die("read " + p);
                b += n;
                left -= static_cast<std::size_t>(n);
            }
        }
        ::close(fd);
    });
    return seconds_since(t0);
}

// Our save: every shard through ShardWriter, then the commit. `changed` marks the slices that
// differ from `base` (all of them for a full save); `hinted` passes the caller's knowledge;
// `track` turns on WriterOptions::track_writes.
struct SaveStats {
    double seconds;
    std::uint64_t written;
    double commit_seconds = 0;   // the part of `seconds` after the last rank finished
};

// What a repetition wrote is emptied when it is done and removed at the end of the run: on
// ext4 without a journal (this project's VMs) the inode allocator skips every inode freed in
// the last minute or more (recently_deleted() in the kernel's fs/ext4/ialloc.c), a buffer
// cache lookup each, so removing a repetition's trees made every file the next ones created
// cost 60-190 us instead of 17 us. A checkpoint creates about ten files whatever its size:
// that weighed on a 1% incremental's 12 ms, and on nothing a job sees, whose checkpoints are
// minutes apart. Truncating frees the data blocks as removing did, so later repetitions
// write to the same kind of blocks (on a VM's thin disk, blocks never written before are
// slower: keeping the data instead made raw writes 3x slower).
class Cleanup {
public:
    void add(const std::string &path) {
        empty(path);
        paths_.push_back(path);
    }
    void remove_all() {
        for (const auto &p : paths_) check(fsio::remove_tree(p));
        paths_.clear();
    }

private:
    static void empty(const std::string &path) {
        struct stat st {};
        if (::lstat(path.c_str(), &st) != 0) die("lstat " + path + ": " + std::strerror(errno));
        if (S_ISREG(st.st_mode) && ::truncate(path.c_str(), 0) != 0)
            die("truncating " + path + ": " + std::strerror(errno));
        if (!S_ISDIR(st.st_mode)) return;   // the `latest` link, or a file just emptied
        auto names = fsio::list_dir(path);
        if (!names) die(names.error());
        for (const auto &n : names.value()) empty(fsio::join(path, n));
    }
    std::vector<std::string> paths_;
};

// Rank k's shard of a checkpoint: its bytes written, or the error.
omni::Result<std::uint64_t> save_shard(const Config &c, const Model &m, const std::string &root,
                                 std::uint64_t step, std::uint32_t k, const WriterOptions &wo,
                                 const std::vector<std::vector<bool>> *changed, bool hinted) {
    auto w = ShardWriter::open(root, step, k, wo);
    if (!w) return omni::make_error(w.error());
    for (std::uint32_t t = 0; t < c.tensors; ++t) {
        Change ch = Change::detect;
        if (hinted && changed) ch = (*changed)[k][t] ? Change::changed : Change::unchanged;
        auto st = w.value()->add_tensor(tensor_name(t), DType::fp32, m.shape(), {k * m.rows, 0},
                                        {m.rows, m.cols}, m.data(k, t), ch);
        if (!st) return omni::make_error(st.error());
    }
    if (auto st = w.value()->finish(); !st) return omni::make_error(st.error());
    return w.value()->bytes_written();
}

// The commit that follows the shards of a save (what one rank of a job does).
void commit_save(const Config &c, const std::string &root, std::uint64_t step) {
    Meta meta;
    meta.step = step;
    meta.world_size = c.shards;
    auto r = commit(root, c.shards, meta);
    if (!r) die(r.error());
}

SaveStats our_save(const Config &c, const Model &m, const std::string &root, std::uint64_t step,
                   const std::string &base, const std::vector<std::vector<bool>> *changed,
                   bool hinted, bool track = false) {
    WriterOptions wo;
    wo.base = base;
    wo.track_writes = track;
    std::vector<std::uint64_t> written(c.shards, 0);
    std::vector<std::string> errors(c.shards);
    const auto t0 = Clock::now();
    // The K ranks write concurrently, as in a job.
    parallel_for(c.shards, c.threads, [&](std::uint32_t k) {
            auto n = save_shard(c, m, root, step, k, wo, changed, hinted);
            if (!n) return void(errors[k] = n.error());
            written[k] = n.value();
        });
    for (const auto &e : errors)
        if (!e.empty()) die(e);
    const auto t1 = Clock::now();
    commit_save(c, root, step);
    std::uint64_t total = 0;
    for (auto w : written) total += w;
    return {seconds_since(t0), total, seconds_since(t1)};
}

// The ranks as processes, as omni-launch runs them under srun: one worker process per shard,
// forked before this process uses HDF5, each with the models in its (copy-on-write shared)
// memory. A save sends every worker a command and waits for all replies; the commit then
// runs here and, as in a job, reads the shards' manifests from their files. Unlike threads
// of one process, the ranks do not queue on HDF5's global lock.
class RankProcesses {
public:
    RankProcesses(const Config &c, std::vector<const Model *> models,
                  const std::vector<std::vector<bool>> &changed)
        : c_(c) {
        for (std::uint32_t k = 0; k < c.shards; ++k) {
            int cmd[2], res[2];
            if (::pipe(cmd) != 0 || ::pipe(res) != 0) die(std::string("pipe: ") + std::strerror(errno));
            const pid_t pid = ::fork();
            if (pid < 0) die(std::string("fork: ") + std::strerror(errno));
            if (pid == 0) {
                ::close(cmd[1]);
                ::close(res[0]);
                for (const auto &w : workers_) {   // the earlier workers' pipes
                    ::close(w.cmd);
                    ::close(w.res);
                }
                serve(c, k, models, changed, cmd[0], res[1]);
            }
            ::close(cmd[0]);
            ::close(res[1]);
            workers_.push_back({pid, cmd[1], res[0]});
        }
    }
    ~RankProcesses() {
        for (const auto &w : workers_) ::close(w.cmd);   // EOF: the worker exits
        for (const auto &w : workers_) {
            int status = 0;
            ::waitpid(w.pid, &status, 0);
            ::close(w.res);
        }
    }
    RankProcesses(const RankProcesses &) = delete;
    RankProcesses &operator=(const RankProcesses &) = delete;

    SaveStats save(const std::string &root, std::uint64_t step, const std::string &base, int model,
                   bool hinted) {
        Command cmd{};
        cmd.step = step;
        cmd.model = model;
        cmd.hinted = hinted ? 1 : 0;
        if (root.size() >= sizeof cmd.root || base.size() >= sizeof cmd.base) die("path too long: " + root);
        std::memcpy(cmd.root, root.data(), root.size());
        std::memcpy(cmd.base, base.data(), base.size());
        const auto t0 = Clock::now();
        for (const auto &w : workers_)
            if (!put(w.cmd, &cmd, sizeof cmd)) die("a rank process is gone");
        std::uint64_t total = 0;
        for (const auto &w : workers_) {
            Reply r{};
            if (!get(w.res, &r, sizeof r)) die("a rank process is gone");
            if (!r.ok) die(std::string(r.error, strnlen(r.error, sizeof r.error)));
            total += r.written;
        }
        const double ranks_done = seconds_since(t0);
        commit_save(c_, root, step);
        const double all = seconds_since(t0);
        return {all, total, all - ranks_done};
    }

private:
    struct Command {
        std::uint64_t step;
        std::int32_t model, hinted;
        char root[2048], base[2048];
    };
    struct Reply {
        std::int32_t ok;
        std::uint64_t written;
        char error[512];
    };
    struct Worker {
        pid_t pid;
        int cmd, res;
    };
    static bool put(int fd, const void *p, std::size_t n) {
        for (std::size_t done = 0; done < n;) {
            const ssize_t w = ::write(fd, static_cast<const char *>(p) + done, n - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return false;
            done += static_cast<std::size_t>(w);
        }
        return true;
    }
    static bool get(int fd, void *p, std::size_t n) {
        for (std::size_t done = 0; done < n;) {
            const ssize_t r = ::read(fd, static_cast<char *>(p) + done, n - done);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return false;
            done += static_cast<std::size_t>(r);
        }
        return true;
    }
    [[noreturn]] static void serve(const Config &c, std::uint32_t k, const std::vector<const Model *> &models,
                                   const std::vector<std::vector<bool>> &changed, int in, int out) {
        Command cmd;
        while (get(in, &cmd, sizeof cmd)) {
            WriterOptions wo;
            wo.base = std::string(cmd.base, strnlen(cmd.base, sizeof cmd.base));
            const std::string root(cmd.root, strnlen(cmd.root, sizeof cmd.root));
            auto n = save_shard(c, *models.at(static_cast<std::size_t>(cmd.model)), root, cmd.step, k,
                                wo, &changed, cmd.hinted != 0);
            Reply r{};
            r.ok = n ? 1 : 0;
            if (n) r.written = n.value();
            else std::snprintf(r.error, sizeof r.error, "rank %u: %s", k, n.error().c_str());
            if (!put(out, &r, sizeof r)) break;
        }
        ::_exit(0);
    }

    const Config &c_;
    std::vector<Worker> workers_;
};

// `read`, if given, gets the bytes the ranks' Readers read from the shard files.
double our_load(const Config &c, const Model &m, const std::string &ckpt, std::uint32_t ranks,
                bool verify, std::vector<char> &dest, std::uint64_t *read = nullptr) {
    std::atomic<std::uint64_t> bytes{0};
    drop_dir_cache(ckpt);
    const auto t0 = Clock::now();
    ReadOptions ro;
    ro.verify_checksums = verify;
    const std::uint64_t total_rows = m.rows * c.shards;
    std::vector<std::string> errors(ranks);
    // The loading ranks run concurrently, each with its own Reader, as in a job.
    parallel_for(ranks, c.threads, [&](std::uint32_t k) {
            const std::uint64_t r0 = total_rows * k / ranks, r1 = total_rows * (k + 1) / ranks;
            if (r1 == r0) return;
            auto r = Reader::open(ckpt, ro);
            if (!r) return void(errors[k] = r.error());
            const std::uint64_t tensor_bytes = m.slice_bytes() * c.shards, row = m.cols * 4;
            for (std::uint32_t t = 0; t < c.tensors; ++t) {
                auto st = r.value()->read(tensor_name(t), {r0, 0}, {r1 - r0, m.cols},
                                          dest.data() + t * tensor_bytes + r0 * row, (r1 - r0) * row);
                if (!st) return void(errors[k] = st.error());
            }
            bytes += r.value()->bytes_read();
        });
    for (const auto &e : errors)
        if (!e.empty()) die(e);
    const double took = seconds_since(t0);
    if (read) *read = bytes;
    return took;
}

// The baseline of the reshard load: the bytes its ranks take from each slice (the rows of
// it that fall in theirs, exactly, without block rounding), read by pread from the places
// the manifest records, by `ranks` ranks on the same threads in the same order as our_load
// (tensor by tensor, each tensor's sources in turn), into the same places of `dest`. What
// this access pattern costs on this machine whoever reads; the manifest is read untimed.
double raw_ranges_read(const Config &c, const Model &m, const std::string &ckpt, std::uint32_t ranks,
                       std::vector<char> &dest) {
    auto rd = Reader::open(ckpt);
    if (!rd) die(rd.error());
    std::vector<const TensorInfo *> tensors(c.tensors);   // found before the clock starts
    for (std::uint32_t t = 0; t < c.tensors; ++t)
        if (!(tensors[t] = rd.value()->find(tensor_name(t)))) die("no tensor " + tensor_name(t));
    drop_dir_cache(ckpt);
    const auto t0 = Clock::now();
    const std::uint64_t total_rows = m.rows * c.shards, row = m.cols * 4, tensor_bytes = m.slice_bytes() * c.shards;
    parallel_for(ranks, c.threads, [&](std::uint32_t k) {
            const std::uint64_t r0 = total_rows * k / ranks, r1 = total_rows * (k + 1) / ranks;
            std::map<std::string, int> fds;
            for (std::uint32_t t = 0; t < c.tensors; ++t) {
                const TensorInfo *ti = tensors[t];
                for (const auto &src : ti->sources) {
                    const std::uint64_t a = std::max(r0, src.offset[0]), z = std::min(r1, src.offset[0] + src.count[0]);
                    if (a >= z) continue;
                    if (!src.data_offset) die("no data_offset for " + ti->name);
                    int &fd = fds[src.file];
                    if (!fd) fd = ::open(fsio::join(ckpt, src.file).c_str(), O_RDONLY | O_CLOEXEC);
                    if (fd < 0) die("open " + src.file);
                    char *b = dest.data() + t * tensor_bytes + a * row;
                    std::uint64_t off = src.data_offset + (a - src.offset[0]) * row, left = (z - a) * row;
                    while (left) {
                        const ssize_t n = ::pread(fd, b, std::min<std::uint64_t>(left, 1u << 20), static_cast<off_t>(off));
                        if (n <= 0) die("pread " + src.file);
                        b += n;
                        off += static_cast<std::uint64_t>(n);
                        left -= static_cast<std::uint64_t>(n);
                    }
                }
            }
            for (const auto &f : fds) ::close(f.second);
        });
    return seconds_since(t0);
}

// Flips the lowest bit of every fp32 of the slices marked in `which`: a training step that
// changes those slices only (twice restores them).
void flip_slices(Model &m, const std::vector<std::vector<bool>> &which) {
    for (std::size_t k = 0; k < which.size(); ++k)
        for (std::size_t t = 0; t < which[k].size(); ++t)
            if (which[k][t])
                for (auto &x : m.slice[k][t]) {
                    std::uint32_t u;
                    std::memcpy(&u, &x, 4);
                    u ^= 1u;
                    std::memcpy(&x, &u, 4);
                }
}

// The trainer's optimizer step: every rank rewrites all its buffers (flips the lowest bit of
// every fp32, so two rewrites restore the model), in parallel as ranks do.
double rewrite_all(const Config &c, Model &m) {
    const auto t0 = Clock::now();
    parallel_for(c.shards, c.threads, [&](std::uint32_t k) {
            for (auto &t : m.slice[k]) {
                auto *u = reinterpret_cast<std::uint32_t *>(t.data());
                for (std::size_t i = 0; i < t.size(); ++i) u[i] ^= 1u;
            }
        });
    return seconds_since(t0);
}

// The simplest copy snapshot: the same slices copied by the same threads with plain memcpy
// into `dest` (faulted in already), and nothing else; bound by memory bandwidth.
double memcpy_floor(const Config &c, const Model &m, std::vector<char> &dest) {
    const std::uint64_t per = m.slice_bytes();
    const auto t0 = Clock::now();
    parallel_for(c.shards, c.threads, [&](std::uint32_t k) {
        for (std::uint32_t t = 0; t < c.tensors; ++t)
            std::memcpy(dest.data() + (std::uint64_t(k) * c.tensors + t) * per, m.slice[k][t].data(), per);
    });
    return seconds_since(t0);
}

// The floor of an incremental that finds its changes by hashing: XXH3 of every slice by the
// same threads, and nothing else. Hashing reads every byte, so it is bound by memory
// bandwidth, which on a machine whose disk writes a tenth as fast is more than 5% of a save.
double hash_floor(const Config &c, const Model &m) {
    std::vector<std::uint64_t> sink(c.shards);
    const auto t0 = Clock::now();
    parallel_for(c.shards, c.threads, [&](std::uint32_t k) {
        for (std::uint32_t t = 0; t < c.tensors; ++t) sink[k] ^= xxh3(m.data(k, t), m.slice_bytes());
    });
    const double s = seconds_since(t0);
    static volatile std::uint64_t kept;   // the hashes are used, so they are computed
    for (auto h : sink) kept = kept ^ h;
    return s;
}

struct AsyncRun {
    double stall = 0;        // snapshot of every rank until all persists are started
    double persisted = 0;    // until all persists are done and committed
    double rewrite = 0;      // the trainer's rewrite of all buffers right after the stall
    double rewrite_idle = 0;   // the same rewrite with nothing in flight (restores the model)
    AsyncStats stats;        // summed over the ranks
};

AsyncRun async_save(const Config &c, Model &m, std::vector<AsyncShardWriter> &writers,
                    const std::string &root, std::uint64_t step) {
    // The stall is the snapshot: every rank adds its slices to its writer (in parallel, as
    // ranks do), then all persists start in the background. Then the trainer goes on and
    // rewrites its buffers while the persists run.
    AsyncRun run;
    std::vector<std::string> errors(c.shards);
    const auto t0 = Clock::now();
    parallel_for(c.shards, c.threads, [&](std::uint32_t k) {
            if (auto st = writers[k].begin(root, step, k); !st) return void(errors[k] = st.error());
            for (std::uint32_t t = 0; t < c.tensors; ++t) {
                auto st = writers[k].add_tensor(tensor_name(t), DType::fp32, m.shape(), {k * m.rows, 0},
                                                {m.rows, m.cols}, m.slice[k][t].data(), Change::changed);
                if (!st) return void(errors[k] = st.error());
            }
        });
    for (auto &w : writers) check(w.submit());
    run.stall = seconds_since(t0);
    for (const auto &e : errors)
        if (!e.empty()) die(e);
    run.rewrite = rewrite_all(c, m);
    for (auto &w : writers) check(w.wait());
    Meta meta;
    meta.step = step;
    meta.world_size = c.shards;
    auto r = commit(root, c.shards, meta);
    if (!r) die(r.error());
    run.persisted = seconds_since(t0);
    run.rewrite_idle = rewrite_all(c, m);
    for (auto &w : writers) {
        const AsyncStats s = w.stats();
        run.stats.slices_protected += s.slices_protected;
        run.stats.slices_copied += s.slices_copied;
        run.stats.faults += s.faults;
        run.stats.bytes_drained += s.bytes_drained;
        run.stats.bytes_faulted += s.bytes_faulted;
        if (run.stats.fallback.empty()) run.stats.fallback = s.fallback;
    }
    return run;
}

// The copy-on-write stall is mostly the kernel write-protecting page table entries: one per
// 4 KiB page, or one per 2 MiB where the buffers are in transparent huge pages. Measured on
// the same bytes in both kinds of page, as tensors of 8 MiB placed on 2 MiB boundaries (the
// model's slices are too small to cover whole huge pages at the default size).
class PagedModel {
public:
    static constexpr std::uint64_t kTensorBytes = std::uint64_t(8) << 20;
    PagedModel(std::uint64_t bytes, bool huge)
        : tensors_(std::max<std::uint64_t>(1, bytes / kTensorBytes)), map_(tensors_ * kTensorBytes + (2 << 20)) {
        if (!map_.data()) die("mmap of " + std::to_string(tensors_ * kTensorBytes + (2 << 20)) + " bytes failed");
        base_ = reinterpret_cast<char *>((reinterpret_cast<std::uintptr_t>(map_.data()) + (2 << 20) - 1) &
                                         ~std::uintptr_t((2 << 20) - 1));
        // Either advice may be refused (THP compiled out): then the pages are what they are,
        // and the huge-page coverage printed says so.
        (void)::madvise(base_, tensors_ * kTensorBytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        for (std::uint64_t i = 0; i < tensors_ * kTensorBytes; i += 4096) base_[i] = static_cast<char>(i >> 12);
    }
    std::uint64_t tensors() const { return tensors_; }
    const char *tensor(std::uint64_t i) const { return base_ + i * kTensorBytes; }
    long huge_kb() const { return omni::ckpt::test::anon_huge_kb(base_, tensors_ * kTensorBytes); }

private:
    std::uint64_t tensors_;
    omni::ckpt::test::Mapping map_;
    char *base_;
};

// One copy-on-write checkpoint of a PagedModel by a single rank: the stall of one rank's
// buffers, without the threads of the other ranks competing for this VM's two cores.
// Returns the stall (begin and add_tensor until the persist is started); commits after the
// persist.
double paged_cow_save(const PagedModel &m, AsyncShardWriter &w, const std::string &root, std::uint64_t step) {
    const Shape shape{PagedModel::kTensorBytes / 4};
    const auto t0 = Clock::now();
    check(w.begin(root, step, 0));
    for (std::uint64_t i = 0; i < m.tensors(); ++i)
        check(w.add_tensor("paged/t" + std::to_string(i), DType::fp32, shape, {0}, shape, m.tensor(i), Change::changed));
    check(w.submit());
    const double stall = seconds_since(t0);
    check(w.wait());
    Meta meta;
    meta.step = step;
    meta.world_size = 1;
    if (auto r = commit(root, 1, meta); !r) die(r.error());
    return stall;
}

// An asynchronous incremental checkpoint against `base`: the caller's hints (`hinted`), or
// write tracking (`track`, Change::detect). Returns the stall (snapshot until all persists
// started) and commits after the persists.
struct AsyncIncr {
    double stall;
    std::uint64_t referenced;   // slices not snapshotted at all
};
AsyncIncr async_incremental(const Config &c, const Model &m, std::vector<AsyncShardWriter> &writers,
                            const std::string &root, std::uint64_t step, const std::string &base,
                            const std::vector<std::vector<bool>> &changed, bool hinted, bool track) {
    WriterOptions wo;
    wo.base = base;
    wo.track_writes = track;
    std::vector<std::string> errors(c.shards);
    const auto t0 = Clock::now();
    parallel_for(c.shards, c.threads, [&](std::uint32_t k) {
            if (auto st = writers[k].begin(root, step, k, wo); !st) return void(errors[k] = st.error());
            for (std::uint32_t t = 0; t < c.tensors; ++t) {
                const Change ch = !hinted ? Change::detect : changed[k][t] ? Change::changed : Change::unchanged;
                auto st = writers[k].add_tensor(tensor_name(t), DType::fp32, m.shape(), {k * m.rows, 0},
                                                {m.rows, m.cols}, m.data(k, t), ch);
                if (!st) return void(errors[k] = st.error());
            }
        });
    for (auto &w : writers) check(w.submit());
    AsyncIncr out{seconds_since(t0), 0};
    for (const auto &e : errors)
        if (!e.empty()) die(e);
    for (auto &w : writers) {
        check(w.wait());
        out.referenced += w.stats().slices_referenced;
    }
    Meta meta;
    meta.step = step;
    meta.world_size = c.shards;
    if (auto r = commit(root, c.shards, meta); !r) die(r.error());
    return out;
}

// The async checkpoint must hold the model as it was at the snapshot, whatever the trainer
// wrote meanwhile: every slice's checksum equals the synchronous save's.
void check_same_checksums(const std::string &a, const std::string &b) {
    auto ra = Reader::open(a);
    auto rb = Reader::open(b);
    if (!ra || !rb) die(!ra ? ra.error() : rb.error());
    for (const auto &t : ra.value()->manifest().tensors) {
        const TensorInfo *u = rb.value()->find(t.name);
        if (!u || u->sources.size() != t.sources.size()) die(a + ": tensor " + t.name + " differs from " + b);
        for (std::size_t i = 0; i < t.sources.size(); ++i)
            if (t.sources[i].xxh3 != u->sources[i].xxh3)
                die(a + ": tensor " + t.name + " is not the model as of the snapshot");
    }
}

}  // namespace

int main(int argc, char **argv) {
    Config c;
    // 1 GiB by default, a small checkpoint still (a 64M-parameter model with its Adam
    // state). Every checkpoint has a fixed cost whatever its size, its files made and three or
    // four fsync round trips, 8-12 ms on the 2-core dev VMs: against a full save at 1.2 GB/s
    // (the VM of 2026-12-02) it was 5% of the save up to 230-350 MiB, at 2-2.5 GB/s (that of
    // 2026-12-03) up to 380-740 MiB. Below that the 1% incremental's ratio measures the fixed
    // cost rather than how an incremental scales (the bench prints the fixed cost either way).
    // The run holds about 5.9x the checkpoint size in memory (6.3 GB; the rank processes
    // share its pages), so --large (2048 MiB, 12.6 GB) still fits a 24 GiB machine.
    std::string size = "1024", shards = "8", tensors = "25", reps = "5", reshard_to = "5",
                threads = std::to_string(std::max(1u, std::thread::hardware_concurrency()));
    po::options_description opts(
        "Usage: ckpt_bench [OPTIONS]\nBenchmark libomni-ckpt against raw I/O of the same bytes; "
        "prints ratios.\n\nOptions");
    opts.add_options()("help,h", "show this help")(
        "dir", po::value<std::string>(&c.dir), "directory on the file system to measure (default: a new one under /tmp)")(
        "size-mib", po::value<std::string>(&size), "checkpoint size in MiB (default 1024)")(
        "large", "a larger run: 2048 MiB unless --size-mib is given")(
        "shards", po::value<std::string>(&shards), "writers K (default 8)")(
        "tensors", po::value<std::string>(&tensors), "logical tensors, each split over the K shards (default 25)")(
        "reshard-to", po::value<std::string>(&reshard_to), "ranks for the reshard load (default 5)")(
        "threads", po::value<std::string>(&threads), "threads running the ranks (default: number of cores)")(
        "reps", po::value<std::string>(&reps), "repetitions per measurement; the median is reported (default 5)");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, opts), vm);
        po::notify(vm);
    } catch (const po::error &e) {
        std::fprintf(stderr, "ckpt_bench: %s\nTry 'ckpt_bench --help'.\n", e.what());
        return 2;
    }
    if (vm.count("help")) {
        std::cout << opts << "\nExit status: 0 success, 1 failure, 2 bad usage.\n";
        return 0;
    }
    if (vm.count("large") && !vm.count("size-mib")) size = "2048";
    auto sz = omni::parse_uint(size, 1, 1u << 20, "--size-mib");
    auto sh = omni::parse_uint(shards, 1, 4096, "--shards");
    auto tn = omni::parse_uint(tensors, 1, 100000, "--tensors");
    auto rp = omni::parse_uint(reps, 1, 100, "--reps");
    auto rt = omni::parse_uint(reshard_to, 1, 4096, "--reshard-to");
    auto th = omni::parse_uint(threads, 1, 1024, "--threads");
    for (const auto *r : {&sz, &sh, &tn, &rp, &rt, &th})
        if (!r->ok()) {
            std::fprintf(stderr, "ckpt_bench: %s\nTry 'ckpt_bench --help'.\n", r->error().c_str());
            return 2;
        }
    c.bytes = sz.value() << 20;
    // A run that cannot fit is refused before it starts, rather than killed by the OOM
    // killer part way with nothing printed.
    const double need = kPeakPerByte * static_cast<double>(c.bytes);
    if (const std::uint64_t avail = mem_available(); avail && need > static_cast<double>(avail)) {
        std::fprintf(stderr,
                     "ckpt_bench: --size-mib %llu needs about %.1f GB of memory (%.0fx the checkpoint), "
                     "and %.1f GB is available (MemAvailable); give a smaller --size-mib\n",
                     static_cast<unsigned long long>(sz.value()), need / 1e9, kPeakPerByte, avail / 1e9);
        return 2;
    }
    c.shards = static_cast<std::uint32_t>(sh.value());
    c.tensors = static_cast<std::uint32_t>(tn.value());
    c.reps = static_cast<int>(rp.value());
    c.reshard_to = static_cast<std::uint32_t>(rt.value());
    c.threads = static_cast<std::uint32_t>(th.value());
    bool own_dir = false;
    if (c.dir.empty()) {
        char tmpl[] = "/tmp/omni-ckpt-bench.XXXXXX";
        if (!::mkdtemp(tmpl)) die("mkdtemp failed");
        c.dir = tmpl;
        own_dir = true;
    }

    const Model m = make_model(c);
    const std::uint64_t bytes = m.slice_bytes() * c.shards * c.tensors;
    const std::uint32_t slices = c.shards * c.tensors;
    std::printf("ckpt_bench: %s in %u shards x %u tensors (%u slices of %.2f MiB) in %s, "
                "%u threads, median of %d\n",
                (std::to_string(bytes >> 20) + " MiB").c_str(), c.shards, c.tensors, slices,
                m.slice_bytes() / 1048576.0, c.dir.c_str(), c.threads, c.reps);

    std::vector<double> t_raw_w, t_save, t_raw_r, t_load, t_load_nv, t_reshard, t_raw_reshard, t_incr, t_incr_hint,
        t_incr_track, t_rw_track;
    std::vector<double> t_stall, t_async_total, t_stall_cow, t_cow_total, t_rw_idle, t_rw_copy, t_rw_cow,
        t_stall_incr_hint, t_stall_incr_track, t_memcpy, t_hash;
    std::uint64_t async_incr_referenced = 0, async_track_referenced = 0;
    std::uint64_t reshard_read = 0;   // bytes the reshard load's ranks read, checked and all
    AsyncStats cow_stats;
    std::uint64_t incr_written = 0, incr_hint_written = 0;
    // 1% of the slices change (at least one), spread over the shards.
    const std::uint32_t n_changed = std::max<std::uint32_t>(1, slices / 100);
    std::vector<std::vector<bool>> changed(c.shards, std::vector<bool>(c.tensors, false));
    for (std::uint32_t i = 0; i < n_changed; ++i) {
        const std::uint32_t idx = static_cast<std::uint32_t>((std::uint64_t(i) * slices) / n_changed);
        changed[idx % c.shards][idx / c.shards] = true;
    }
    Model m2 = m.derive(changed);   // the model after a step that changed 1% of its slices
    for (auto &s : m2.slice)
        for (auto &t : s)
            for (auto &x : t) x += 1.0f;
    // Forked now: before this process starts threads or opens anything with HDF5.
    auto procs = std::make_unique<RankProcesses>(c, std::vector<const Model *>{&m, &m2}, changed);
    std::vector<double> t_save_p, t_incr_hint_p, t_incr_hint_p_commit, t_incr_hint_commit;
    // Held by pointer, so that they and their snapshot memory go before the paged phase.
    auto async = std::make_unique<std::vector<AsyncShardWriter>>(c.shards);
    auto async_cow = std::make_unique<std::vector<AsyncShardWriter>>(c.shards);
    for (auto &w : *async_cow) w.set_snapshot(Snapshot::copy_on_write);
    Model live = m;   // the trainer's buffers, rewritten during the async persists
    std::vector<double> t_stall_small, t_stall_huge;
    Model tracked = m;   // the trainer's buffers, checkpointed with write tracking
    const std::string track_status = write_tracking_status();
    std::vector<char> dest(bytes, 1);   // filled once, so no read pays for page faults
    std::uint64_t step = 0;
    // A writer's snapshot memory is reused from one checkpoint to the next, so a job's first
    // snapshot also pays for faulting it in and every later one does not. The timed runs
    // measure the steady state; one untimed checkpoint per writer comes first, and its stall
    // is reported on its own line.
    double first_stall_copy = 0, first_stall_cow = 0;
    Cleanup cleanup;
    {
        const std::string warm = fsio::join(c.dir, "warm");
        first_stall_copy = async_save(c, live, *async, warm, ++step).stall;
        first_stall_cow = async_save(c, live, *async_cow, warm, ++step).stall;
        cleanup.add(warm);
    }
    for (int rep = 0; rep < c.reps; ++rep) {
        const std::string root = fsio::join(c.dir, "root" + std::to_string(rep));
        const std::string raw = fsio::join(c.dir, "raw" + std::to_string(rep));
        // Alternate which side goes first: on a shared machine, background write-back of the
        // previous step would otherwise always penalise the same side.
        const bool raw_first = rep % 2 == 0;
        if (raw_first) t_raw_w.push_back(raw_write(c, m, raw));
        const auto full = our_save(c, m, root, ++step, "", nullptr, false);
        t_save.push_back(full.seconds);
        if (!raw_first) t_raw_w.push_back(raw_write(c, m, raw));
        const std::string ck = fsio::join(root, step_dir_name(step));
        // One untimed pass over both: the first read of freshly written files is slower on
        // some storage (a hypervisor's or array's write-back cache) and must not land on
        // whichever side happens to read first.
        (void)raw_read(c, m, raw, dest);
        (void)our_load(c, m, ck, c.shards, false, dest);
        if (raw_first) t_raw_r.push_back(raw_read(c, m, raw, dest));
        t_load.push_back(our_load(c, m, ck, c.shards, true, dest));
        if (!raw_first) t_raw_r.push_back(raw_read(c, m, raw, dest));
        t_load_nv.push_back(our_load(c, m, ck, c.shards, false, dest));
        if (raw_first) t_raw_reshard.push_back(raw_ranges_read(c, m, ck, c.reshard_to, dest));
        t_reshard.push_back(our_load(c, m, ck, c.reshard_to, true, dest, &reshard_read));
        if (!raw_first) t_raw_reshard.push_back(raw_ranges_read(c, m, ck, c.reshard_to, dest));
        const auto inc = our_save(c, m2, root, ++step, ck, &changed, false);
        const std::uint64_t inc_step = step;
        t_incr.push_back(inc.seconds);
        t_hash.push_back(hash_floor(c, m));
        incr_written = inc.written;
        const auto inch = our_save(c, m2, root, ++step, ck, &changed, true);
        t_incr_hint.push_back(inch.seconds);
        t_incr_hint_commit.push_back(inch.commit_seconds);
        incr_hint_written = inch.written;
        // The same two saves with the ranks as processes.
        t_save_p.push_back(procs->save(root, ++step, "", 0, false).seconds);
        const std::string ckp = fsio::join(root, step_dir_name(step));
        const auto inchp = procs->save(root, ++step, ckp, 1, true);
        if (inchp.written != inch.written) die("the incremental of the rank processes wrote other bytes");
        t_incr_hint_p.push_back(inchp.seconds);
        t_incr_hint_p_commit.push_back(inchp.commit_seconds);
        // Write tracking in its steady state: the previous checkpoint of these buffers (untimed;
        // they equal the base, so it references everything) armed them, the trainer changes
        // 1% of the slices, and the timed checkpoint hashes only what was written.
        (void)our_save(c, tracked, root, ++step, ck, nullptr, false, true);
        flip_slices(tracked, changed);
        const auto inct = our_save(c, tracked, root, ++step, ck, &changed, false, true);
        const std::uint64_t inct_step = step;
        t_incr_track.push_back(inct.seconds);
        if (inct.written != inc.written)
            die("the write-tracked incremental wrote " + std::to_string(inct.written) +
                " bytes, hashing found " + std::to_string(inc.written) + " bytes changed");
        // What tracking costs the trainer: its first store to each page after a checkpoint
        // takes a fault. Everything is armed now; the second rewrite restores the model.
        t_rw_track.push_back(rewrite_all(c, tracked));
        (void)rewrite_all(c, tracked);
        flip_slices(tracked, changed);
        // The two snapshot modes, alternating which goes first, and the memcpy floor
        // before them or after them.
        if (rep % 2 == 0) t_memcpy.push_back(memcpy_floor(c, live, dest));
        for (int mode = 0; mode < 2; ++mode) {
            const bool cow = (mode == 0) == (rep % 2 == 1);
            const AsyncRun a = async_save(c, live, cow ? *async_cow : *async, root, ++step);
            check_same_checksums(fsio::join(root, step_dir_name(step)), ck);
            (cow ? t_stall_cow : t_stall).push_back(a.stall);
            (cow ? t_cow_total : t_async_total).push_back(a.persisted);
            (cow ? t_rw_cow : t_rw_copy).push_back(a.rewrite);
            t_rw_idle.push_back(a.rewrite_idle);
            if (cow) cow_stats = a.stats;
        }
        if (rep % 2 == 1) t_memcpy.push_back(memcpy_floor(c, live, dest));
        // Asynchronous 1% incrementals: the stall covers only the slices that changed, told
        // by the caller or found by write tracking (primed by an untimed tracked checkpoint).
        const std::string inc_ck = fsio::join(root, step_dir_name(inc_step));
        const AsyncIncr ah = async_incremental(c, m2, *async, root, ++step, ck, changed, true, false);
        t_stall_incr_hint.push_back(ah.stall);
        async_incr_referenced = ah.referenced;
        check_same_checksums(fsio::join(root, step_dir_name(step)), inc_ck);
        (void)async_incremental(c, tracked, *async, root, ++step, ck, changed, false, true);
        flip_slices(tracked, changed);
        const AsyncIncr at = async_incremental(c, tracked, *async, root, ++step, ck, changed, false, true);
        t_stall_incr_track.push_back(at.stall);
        async_track_referenced = at.referenced;
        check_same_checksums(fsio::join(root, step_dir_name(step)), fsio::join(root, step_dir_name(inct_step)));
        flip_slices(tracked, changed);
        cleanup.add(raw);
        cleanup.add(root);
    }
    // What only the loop above uses goes now, so the paged phase's two models do not add to
    // its peak (the rank processes share the models' pages, and must exit for them to go).
    procs.reset();
    async.reset();
    async_cow.reset();
    m2 = Model();
    live = Model();
    tracked = Model();
    std::vector<char>().swap(dest);
    // Copy-on-write of 8 MiB tensors in 4 KiB pages and in huge pages, alternating, in a phase
    // of their own: while a model advised MADV_HUGEPAGE is mapped, khugepaged and compaction
    // move pages of this whole process, and every measurement beside it pays for the faults
    // (on the 2-core dev VM the checksummed load above took up to 0.33 s instead of 0.05 s).
    long huge_kb = 0;
    std::uint64_t paged_tensors = 0;
    {
        const PagedModel paged_small(bytes, false), paged_huge(bytes, true);
        AsyncShardWriter cow_small(Snapshot::copy_on_write), cow_huge(Snapshot::copy_on_write);
        const std::string paged = fsio::join(c.dir, "paged");
        (void)paged_cow_save(paged_small, cow_small, paged, ++step);   // snapshot memory faulted in
        (void)paged_cow_save(paged_huge, cow_huge, paged, ++step);
        for (int rep = 0; rep < c.reps; ++rep)
            for (int kind = 0; kind < 2; ++kind) {
                const bool huge = (kind == 0) == (rep % 2 == 1);
                (huge ? t_stall_huge : t_stall_small)
                    .push_back(paged_cow_save(huge ? paged_huge : paged_small, huge ? cow_huge : cow_small, paged, ++step));
            }
        huge_kb = paged_huge.huge_kb();
        paged_tensors = paged_huge.tensors();
        cleanup.add(paged);
    }
    cleanup.remove_all();
    if (own_dir) check(fsio::remove_tree(c.dir));

    const double mib = static_cast<double>(bytes) / 1048576.0;
    auto line = [&](const std::string &what, const std::vector<double> &v) {
        std::printf("  %-44s %8.3f s  %8.1f MiB/s  %s\n", what.c_str(), median(v), mib / median(v), range(v).c_str());
    };
    std::printf("\npage cache: dropped (fdatasync + POSIX_FADV_DONTNEED) before every timed read, raw and ours;\n"
                "  one untimed read of both first; raw and ours alternate which goes first\n"
                "ranks: threads of this process; shared in-process: parsed index, manifests handed to commit;\n"
                "  every rank, threads or processes, finds the base's slices in the shard it wrote of it\n"
                "async writers: one untimed checkpoint each first, so the timed stalls have their snapshot\n"
                "  memory faulted in, as every checkpoint of a job but its first\n");
    std::printf("files: emptied after each repetition and removed at the end, so no repetition creates\n"
                "  files where inodes were just freed (costly on ext4 without a journal)\n");
    std::printf("\nmedian times (min..max over %d):\n", c.reps);
    line("raw write + fsync (K files on the same threads)", t_raw_w);
    line("our save (K shards + index + commit)", t_save);
    line("raw read (K files on the same threads)", t_raw_r);
    line("our load (same layout, checksums)", t_load);
    line("our load (same layout, no checksums)", t_load_nv);
    line("our reshard load (" + std::to_string(c.shards) + " -> " + std::to_string(c.reshard_to) + ")", t_reshard);
    line("raw read of the reshard's byte ranges", t_raw_reshard);
    std::printf("  %-44s %8.3f s  %s  (%u of %u slices changed)\n", "our incremental save (detect by hash)",
                median(t_incr), range(t_incr).c_str(), n_changed, slices);
    line("  ... XXH3 of every slice alone", t_hash);
    std::printf("  %-44s %8.3f s  %s  (commit %.1f ms of it)\n", "our incremental save (caller hints)",
                median(t_incr_hint), range(t_incr_hint).c_str(), 1e3 * median(t_incr_hint_commit));
    line("our save, ranks as processes", t_save_p);
    std::printf("  %-44s %8.3f s  %s  (commit %.1f ms of it)\n", "our incremental save (hints), as processes",
                median(t_incr_hint_p), range(t_incr_hint_p).c_str(), 1e3 * median(t_incr_hint_p_commit));
    std::printf("  %-44s %8.3f s  %s%s%s\n", "our incremental save (write tracking)", median(t_incr_track),
                range(t_incr_track).c_str(), track_status.empty() ? "" : "  (unavailable, hashed: ",
                track_status.empty() ? "" : (track_status + ")").c_str());
    std::printf("  %-44s %8.3f s  %s  (persist finished after %.3f s)\n", "async stall, copy (memcpy to host memory)",
                median(t_stall), range(t_stall).c_str(), median(t_async_total));
    line("  ... plain memcpy of the same slices", t_memcpy);
    std::printf("  %-44s %8.3f s  %s  (persist finished after %.3f s)\n", "async stall, copy-on-write (write-protect)",
                median(t_stall_cow), range(t_stall_cow).c_str(), median(t_cow_total));
    std::printf("  %-44s %8.3f s  (copy), %.3f s (copy-on-write): their snapshot memory faulted in\n",
                "  ... a writer's first snapshot (untimed run)", first_stall_copy, first_stall_cow);
    std::printf("  %-44s %9.4f s  %s  (one rank, %llu tensors of 8 MiB, 4 KiB pages)\n", "async stall, copy-on-write, 8 MiB tensors",
                median(t_stall_small), range(t_stall_small, 4).c_str(), static_cast<unsigned long long>(paged_tensors));
    std::printf("  %-44s %9.4f s  %s  (transparent huge pages: %ld of %llu KiB)\n", "  ... the same in transparent huge pages",
                median(t_stall_huge), range(t_stall_huge, 4).c_str(), huge_kb,
                static_cast<unsigned long long>(paged_tensors * (PagedModel::kTensorBytes >> 10)));
    std::printf("  %-44s %8.3f s  %s  (%llu of %u slices not snapshotted)\n", "async stall, 1% incremental, caller hints",
                median(t_stall_incr_hint), range(t_stall_incr_hint).c_str(),
                static_cast<unsigned long long>(async_incr_referenced), slices);
    std::printf("  %-44s %8.3f s  %s  (%llu of %u slices not snapshotted)\n", "async stall, 1% incremental, write tracking",
                median(t_stall_incr_track), range(t_stall_incr_track).c_str(),
                static_cast<unsigned long long>(async_track_referenced), slices);
    std::printf("  %-44s %8.3f s  %s\n", "trainer rewrites all buffers, idle",
                median(t_rw_idle), range(t_rw_idle).c_str());
    std::printf("  %-44s %8.3f s  %s\n", "  ... right after a copy snapshot",
                median(t_rw_copy), range(t_rw_copy).c_str());
    std::printf("  %-44s %8.3f s  %s  (last: %llu writes stopped, %.1f MiB copied for them, %.1f MiB by the persist)\n",
                "  ... right after a copy-on-write snapshot", median(t_rw_cow), range(t_rw_cow).c_str(),
                static_cast<unsigned long long>(cow_stats.faults), cow_stats.bytes_faulted / 1048576.0,
                cow_stats.bytes_drained / 1048576.0);
    std::printf("  %-44s %8.3f s  %s\n", "  ... right after a write-tracked checkpoint",
                median(t_rw_track), range(t_rw_track).c_str());
    if (cow_stats.slices_copied)
        std::printf("  copy-on-write copied %llu of %u slices instead: %s\n",
                    static_cast<unsigned long long>(cow_stats.slices_copied), slices, cow_stats.fallback.c_str());

    std::printf("\nratios (goal in brackets):\n");
    std::printf("  save throughput / raw write            %6.2fx  [>= 0.9x]\n", median(t_raw_w) / median(t_save));
    std::printf("  load throughput / raw read             %6.2fx  [>= 0.9x]\n", median(t_raw_r) / median(t_load));
    std::printf("  load without checksums / raw read      %6.2fx\n", median(t_raw_r) / median(t_load_nv));
    std::printf("  reshard-load throughput / raw read     %6.2fx  (read %.2fx the checkpoint's bytes, checksums "
                "checked by block)\n",
                median(t_raw_r) / median(t_reshard), double(reshard_read) / double(bytes));
    std::printf("  reshard-load / raw read of its ranges  %6.2fx  (the same rows from the same places, by pread)\n",
                median(t_raw_reshard) / median(t_reshard));
    std::printf("  incremental bytes / full bytes         %6.2f%%  [<= 2%%]\n", 100.0 * incr_written / bytes);
    // Finding the changes by hashing costs at least a hash of every byte: the 5% goal is for
    // an incremental told its changes (hints, write tracking), and this line shows the floor.
    std::printf("  incremental time / full save (detect)  %6.2f%%  (hashes every slice: the hash alone is %.2f%%)\n",
                100.0 * median(t_incr) / median(t_save), 100.0 * median(t_hash) / median(t_save));
    std::printf("  incremental time / full save (hinted)  %6.2f%%  [<= 5%%]  (%.2f%% of bytes)\n",
                100.0 * median(t_incr_hint) / median(t_save), 100.0 * incr_hint_written / bytes);
    std::printf("  incremental time / full save (tracked) %6.2f%%  [<= 5%%]\n", 100.0 * median(t_incr_track) / median(t_save));
    std::printf("  ranks as processes: save / raw write %5.2fx, incremental (hinted) / full save %.2f%%\n",
                median(t_raw_w) / median(t_save_p), 100.0 * median(t_incr_hint_p) / median(t_save_p));
    // An incremental costs what a checkpoint costs whatever its size (files made, fsyncs, the
    // index) plus its share of the bytes at the full save's rate; only the bytes scale with the
    // model. The fixed part against the full save says from which size the 5% goal holds here.
    const double changed_share = static_cast<double>(incr_hint_written) / static_cast<double>(bytes);
    auto fixed_cost = [&](const std::vector<double> &inc, const std::vector<double> &full) {
        const double f = median(inc) - changed_share * median(full);
        const double from_mib = changed_share < 0.05 ? f / (0.05 - changed_share) * mib / median(full) : 0;
        return std::make_pair(f, from_mib);
    };
    const auto [fixed_t, from_t] = fixed_cost(t_incr_hint, t_save);
    const auto [fixed_p, from_p] = fixed_cost(t_incr_hint_p, t_save_p);
    std::printf("  incremental's fixed cost (hinted)      %6.1f ms threads, %.1f ms processes: the 5%% goal\n"
                "    holds from a checkpoint of about %.0f MiB (threads), %.0f MiB (processes) on this machine\n",
                1e3 * fixed_t, 1e3 * fixed_p, from_t, from_p);
    std::printf("  async stall / sync save, copy          %6.2f%%  [<= 10%%]\n", 100.0 * median(t_stall) / median(t_save));
    std::printf("  async stall / sync save, copy-on-write %6.2f%%  [<= 10%%]\n", 100.0 * median(t_stall_cow) / median(t_save));
    std::printf("  async stall, copy / plain memcpy        %5.2fx  (the memcpy alone: %.2f%% of a sync save)\n",
                median(t_stall) / median(t_memcpy), 100.0 * median(t_memcpy) / median(t_save));
    std::printf("  copy-on-write stall, huge / 4 KiB pages  %6.3fx  (8 MiB tensors; %.2f%% of a sync save)\n",
                median(t_stall_huge) / median(t_stall_small), 100.0 * median(t_stall_huge) / median(t_save));
    std::printf("  async 1%% incremental stall / sync save %5.2f%% hinted, %.2f%% tracked\n",
                100.0 * median(t_stall_incr_hint) / median(t_save), 100.0 * median(t_stall_incr_track) / median(t_save));
    std::printf("  trainer's rewrite after COW snapshot   %+6.1f ms vs after a copy snapshot, %+.1f ms vs idle\n",
                1e3 * (median(t_rw_cow) - median(t_rw_copy)), 1e3 * (median(t_rw_cow) - median(t_rw_idle)));
    std::printf("  trainer's rewrite after tracked save   %+6.1f ms vs idle (one fault per page written)\n",
                1e3 * (median(t_rw_track) - median(t_rw_idle)));
    return 0;
}
