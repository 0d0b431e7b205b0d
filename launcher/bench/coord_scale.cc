// The coordinator's cost against the number of ranks (#46, "Past one machine, measured").
//
// The real coordinator (coord/coordinator.h, configured as omni-launch configures it) runs
// in a child process, so its memory and CPU time are read from /proc apart from the ranks'.
// The ranks are DEALER connections over loopback TCP driven by one thread (coord_swarm.h).
// For each size it measures registration (connect + join of every rank to the formation
// decision), a boundary without change, a heartbeat round, a planned shrink by one unit and
// the grow back (announced a boundary ahead, as omni-launch does by default: both the
// announcing and the applying boundary), and a lost rank (its connection dropped, omni-launch
// reports it, the survivors get the rewind), a store read by every rank, and one status request
// (the supervisor's poll). Timings: wall time (all requests sent -> every
// answer) and "tail" (the last arrival, or the lost report, sent -> every answer), plus the
// coordinator's CPU time for the round. Not a test: it reports, it never fails on time.
//
//   make -C build/launcher bench-coord-scale [BENCH_ARGS="--sizes 16,64 --reps 10"]
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/coord_swarm.h"
#include "coord/coordinator.h"
#include "coord/secret.h"
#include "coord/wire.h"

using namespace omni::launcher;
using omni::launcher::bench::RoundTime;
using omni::launcher::bench::Swarm;

namespace {

struct Options {
    std::vector<std::size_t> sizes{16, 64, 256, 1024};
    int reps = 20;      // boundaries and heartbeat rounds per size
    int changes = 5;    // shrinks (each grown back) and losses (each grown back) per size
    int registrations = 3;
    std::uint32_t unit_size = 4;
    bool announce = true;  // omni-launch's default
    bool log = false;      // keep the coordinator's log lines (stderr)
};

// ---- the coordinator in a child process -------------------------------------------------

struct Host {
    pid_t pid = -1;
    int stop_fd = -1;  // closing it stops the child
    std::string endpoint;
};

// Forks before any thread exists in this process (the previous size's swarm is gone).
Host spawn_coordinator(const CoordinatorConfig &cfg, bool log) {
    int up[2], down[2];
    if (::pipe(up) != 0 || ::pipe(down) != 0) throw std::runtime_error("pipe failed");
    Host h;
    h.pid = ::fork();
    if (h.pid < 0) throw std::runtime_error("fork failed");
    if (h.pid == 0) {
        ::close(up[0]);
        ::close(down[1]);
        if (!log) {
            int null = ::open("/dev/null", O_WRONLY);
            ::dup2(null, 2);
        }
        auto c = Coordinator::start(cfg);
        std::string line = c ? c.value()->endpoints().front() + "\n" : "error: " + c.error() + "\n";
        if (::write(up[1], line.data(), line.size()) < 0) ::_exit(1);
        char b;
        while (::read(down[0], &b, 1) > 0) {
        }
        if (c) c.value()->stop();
        ::_exit(0);
    }
    ::close(up[1]);
    ::close(down[0]);
    h.stop_fd = down[1];
    char buf[256];
    ssize_t n = ::read(up[0], buf, sizeof buf - 1);
    ::close(up[0]);
    h.endpoint.assign(buf, n > 0 ? std::size_t(n) : 0);
    while (!h.endpoint.empty() && h.endpoint.back() == '\n') h.endpoint.pop_back();
    if (h.endpoint.rfind("tcp://", 0) != 0) throw std::runtime_error("coordinator: " + h.endpoint);
    return h;
}

void stop_coordinator(Host &h) {
    ::close(h.stop_fd);
    int st = 0;
    ::waitpid(h.pid, &st, 0);
}

long rss_kib(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

// CPU time of the child's threads, in ms: all of them, and the service thread alone (not
// libzmq's "ZMQbg/" threads): the service thread is the one that serialises every request.
// schedstat counts run time exactly, where /proc/PID/stat counts 10 ms ticks.
struct Cpu {
    double all = 0, service = 0;
};
Cpu cpu_ms(pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/task";
    Cpu c;
    if (DIR *d = ::opendir(dir.c_str())) {
        while (dirent *e = ::readdir(d)) {
            if (e->d_name[0] == '.') continue;
            const std::string task = dir + "/" + e->d_name;
            std::ifstream f(task + "/schedstat"), name(task + "/comm");
            double run = 0;
            std::string comm;
            std::getline(name, comm);
            if (!(f >> run)) continue;
            c.all += run / 1e6;
            if (comm.rfind("ZMQbg/", 0) != 0) c.service += run / 1e6;
        }
        ::closedir(d);
    }
    return c;
}

// ---- statistics --------------------------------------------------------------------------

struct Series {
    std::vector<double> wall, tail, cpu, service;
};

double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}
double lo(const std::vector<double> &v) { return v.empty() ? NAN : *std::min_element(v.begin(), v.end()); }
double hi(const std::vector<double> &v) { return v.empty() ? NAN : *std::max_element(v.begin(), v.end()); }

// ---- one job of N ranks ------------------------------------------------------------------

// A measured round: its times and the coordinator's CPU time during it.
struct Round {
    RoundTime t;
    double cpu = 0, service = 0;
};

class Job {
public:
    Job(const Options &o, std::size_t n, const std::string &secret)
        : o_(o), n_(n), units_total_(static_cast<std::uint32_t>(n / o.unit_size)), secret_(secret) {
        epoch_.assign(units_total_, 0);
    }
    ~Job() {
        swarm_.reset();  // its I/O thread ends before the next fork
        if (host_.pid > 0) stop_coordinator(host_);
    }

    CoordinatorConfig config() const {
        CoordinatorConfig c;
        c.bind = {"tcp://127.0.0.1:0"};
        c.secret = secret_;
        c.protocol.unit_size = o_.unit_size;
        c.protocol.initial_units = c.protocol.max_units = units_total_;
        c.protocol.min_units = 1;
        // As omni-launch sets them (launch/omni_launch.cc): liveness = boundary timeout.
        c.protocol.boundary_timeout_ms = c.protocol.liveness_timeout_ms = 30000;
        c.protocol.announce_planned = o_.announce;
        return c;
    }

    // Starts the coordinator and has every rank join; returns the registration's time.
    Round register_all() {
        host_ = spawn_coordinator(config(), o_.log);
        rss_idle_ = rss_kib(host_.pid);
        const Cpu c0 = cpu_ms(host_.pid);
        const auto t0 = std::chrono::steady_clock::now();
        swarm_ = std::make_unique<Swarm>(host_.endpoint, secret_, n_ + 1);
        for (std::size_t i = 0; i <= n_; ++i) swarm_->open(i);
        for (std::uint32_t u = 0; u < units_total_; ++u)
            for (std::uint32_t s = 0; s < o_.unit_size; ++s) queue_join(u, s);
        auto rt = expect(swarm_->run(all_ranks(), 120000), "registration");
        rt.total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        const Cpu c1 = cpu_ms(host_.pid);
        check_same(all_ranks(), "reshaped", "registration");
        rss_formed_ = rss_kib(host_.pid);
        return {rt, c1.all - c0.all, c1.service - c0.service};
    }

    Round boundary() { return boundary_round(members(), {}, "continue", "boundary"); }

    Round heartbeat() {
        return timed([&] {
            for (auto i : members()) {
                Request r;
                r.op = Op::Heartbeat;
                r.id = id_of(i);
                r.generation = generation_;
                swarm_->queue(i, r);
            }
            return expect(swarm_->run(members(), 30000), "heartbeat");
        });
    }

    // Every rank reads one key of the store: a request of the kind Gloo's full-mesh
    // rendezvous sends N - 1 of per rank (doc/design.md, "Scaling").
    Round kv_get() {
        Request set;
        set.op = Op::KvSet;
        set.generation = generation_;
        set.keys = {"bench/addr"};
        set.value = std::string(64, 'a');
        swarm_->queue(ctl(), set);
        expect(swarm_->run({ctl()}, 10000), "kv_set");
        return timed([&] {
            for (auto i : members()) {
                Request r;
                r.op = Op::KvGet;
                r.generation = generation_;
                r.keys = {"bench/addr"};
                r.timeout_ms = 10000;
                swarm_->queue(i, r);
            }
            return expect(swarm_->run(members(), 30000), "kv_get");
        });
    }

    // omni-launch's supervisor asks for the status every 50 ms; its size grows with the job.
    Round status() {
        return timed([&] {
            Request r;
            r.op = Op::Status;
            swarm_->queue(ctl(), r);
            return expect(swarm_->run({ctl()}, 10000), "status");
        });
    }

    // A planned shrink by one unit: the announcing boundary, then the applying one.
    std::pair<Round, Round> shrink() {
        ctl_reshape(static_cast<std::uint32_t>(units_.size()) - 1);
        Round announce{};
        if (o_.announce) announce = boundary_round(members(), {}, "continue", "shrink announce");
        auto apply = boundary_round(members(), {}, "reshaped", "shrink");
        return {announce, apply};
    }

    // Grows back to every unit: the missing units' ranks join (pending), then the members
    // meet at the announcing and the applying boundary, the joiners answered with them.
    std::pair<Round, Round> grow() {
        std::vector<std::size_t> joiners;
        for (std::uint32_t u = 0; u < units_total_; ++u) {
            if (std::find(units_.begin(), units_.end(), u) != units_.end()) continue;
            for (std::uint32_t s = 0; s < o_.unit_size; ++s) {
                queue_join(u, s);
                joiners.push_back(index(u, s));
            }
        }
        expect(swarm_->run({}, 1000), "joins");
        // A new connection's join comes after its handshake: wait until every joiner is
        // pending, as omni-launch's grow waits for complete units, so that the measured
        // boundaries are the grow's and not ones that still wait for a joiner.
        for (int tries = 0; pending_joiners() < joiners.size(); ++tries) {
            if (tries == 1000) throw std::runtime_error("joiners not pending after 10 s");
            ::usleep(10000);
        }
        ctl_reshape(units_total_);
        Round announce{};
        if (o_.announce) {
            announce = boundary_round(members(), joiners, "continue", "grow announce");
            for (auto i : joiners) queue_join(unit_of(i), slot_of(i));  // early admission: join again
        }
        auto apply = boundary_round(members(), joiners, "reshaped", "grow");
        return {announce, apply};
    }

    // A rank of the middle unit dies: its connection drops, the others arrive at the
    // boundary and wait, omni-launch reports it lost; tail = that report -> every answer.
    Round lose_one() {
        const std::uint32_t unit = units_[units_.size() / 2];
        const std::size_t victim = index(unit, 0);
        const std::string victim_id = id_of(victim);
        swarm_->close(victim);
        std::vector<std::size_t> survivors;
        for (auto i : members())
            if (i != victim) survivors.push_back(i);
        auto rt = timed([&] {
            for (auto i : survivors) queue_boundary(i);
            Request r;
            r.op = Op::Lost;
            r.id = victim_id;
            swarm_->queue(ctl(), r);
            auto await = survivors;
            await.push_back(ctl());
            return expect(swarm_->run(await, 30000), "lost");
        });
        check_same(survivors, "reshaped", "lost");
        ++step_;
        // The dropped unit comes back under new ids (a lost id is fenced out for good), on a
        // new connection for the dead rank.
        ++epoch_[unit];
        swarm_->open(victim);
        return rt;
    }

    long rss_idle() const { return rss_idle_; }
    long rss_formed() const { return rss_formed_; }
    long rss_now() const { return rss_kib(host_.pid); }
    std::uint64_t sweeps() const { return swarm_ ? swarm_->sweeps() : 0; }

private:
    std::size_t index(std::uint32_t unit, std::uint32_t slot) const { return std::size_t(unit) * o_.unit_size + slot; }
    std::uint32_t unit_of(std::size_t i) const { return static_cast<std::uint32_t>(i / o_.unit_size); }
    std::uint32_t slot_of(std::size_t i) const { return static_cast<std::uint32_t>(i % o_.unit_size); }
    std::size_t ctl() const { return n_; }  // omni-launch / omni-ctl's connection
    std::string id_of(std::size_t i) const {
        return "u" + std::to_string(unit_of(i)) + "s" + std::to_string(slot_of(i)) + "e" +
               std::to_string(epoch_[unit_of(i)]);
    }
    std::vector<std::size_t> all_ranks() const {
        std::vector<std::size_t> v(n_);
        for (std::size_t i = 0; i < n_; ++i) v[i] = i;
        return v;
    }
    // The current generation's ranks, in rank order.
    std::vector<std::size_t> members() const {
        std::vector<std::size_t> v;
        for (auto u : units_)
            for (std::uint32_t s = 0; s < o_.unit_size; ++s) v.push_back(index(u, s));
        return v;
    }

    std::size_t pending_joiners() {
        status();
        auto j = nlohmann::json::parse(swarm_->reply(ctl()));
        return j.at("status").at("pending_joiners").size();
    }

    void queue_join(std::uint32_t u, std::uint32_t s) {
        Request r;
        r.op = Op::Join;
        r.id = id_of(index(u, s));
        r.unit = u;
        r.slot = s;
        r.node = "node" + std::to_string(u);
        swarm_->queue(index(u, s), r);
    }
    void queue_boundary(std::size_t i) {
        Request r;
        r.op = Op::Boundary;
        r.id = id_of(i);
        r.generation = generation_;
        r.step = step_;
        swarm_->queue(i, r);
    }
    void ctl_reshape(std::uint32_t units) {
        Request r;
        r.op = Op::Reshape;
        r.units = units;
        swarm_->queue(ctl(), r);
        expect(swarm_->run({ctl()}, 10000), "reshape request");
    }

    template <class F>
    Round timed(F f) {
        const Cpu c0 = cpu_ms(host_.pid);
        RoundTime rt = f();
        const Cpu c1 = cpu_ms(host_.pid);
        return {rt, c1.all - c0.all, c1.service - c0.service};
    }

    Round boundary_round(const std::vector<std::size_t> &ranks, const std::vector<std::size_t> &joiners,
                             const char *kind, const char *what) {
        auto rt = timed([&] {
            for (auto i : ranks) queue_boundary(i);
            auto await = ranks;
            await.insert(await.end(), joiners.begin(), joiners.end());
            return expect(swarm_->run(await, 30000), what);
        });
        auto await = ranks;
        await.insert(await.end(), joiners.begin(), joiners.end());
        check_same(await, kind, what);
        ++step_;
        return rt;
    }

    // Every rank got the very same decision, of the expected kind; follows its layout.
    void check_same(const std::vector<std::size_t> &ranks, const char *kind, const char *what) {
        const std::string first = bench::decision_text(swarm_->reply(ranks.front()));
        for (auto i : ranks)
            if (bench::decision_text(swarm_->reply(i)) != first)
                throw std::runtime_error(std::string(what) + ": ranks got different decisions");
        auto d = decision_from_json(nlohmann::json::parse(first));
        if (!d) throw std::runtime_error(std::string(what) + ": " + d.error());
        if (to_string(d.value().kind) != std::string(kind))
            throw std::runtime_error(std::string(what) + ": expected " + kind + ", got " +
                                     to_string(d.value().kind) + " (" + d.value().reason + ")");
        if (d.value().kind == DecisionKind::Reshaped) {
            generation_ = d.value().next.generation;
            units_ = d.value().next.units;
        }
    }

    RoundTime expect(omni::Result<RoundTime> r, const char *what) {
        if (!r) throw std::runtime_error(std::string(what) + ": " + r.error());
        return r.value();
    }

    const Options &o_;
    std::size_t n_;
    std::uint32_t units_total_;
    std::string secret_;
    Host host_;
    std::unique_ptr<Swarm> swarm_;
    std::vector<std::uint32_t> units_, epoch_;
    std::uint64_t generation_ = 0, step_ = 1;
    long rss_idle_ = 0, rss_formed_ = 0;
};

// ---- the run -----------------------------------------------------------------------------

struct SizeResult {
    std::map<std::string, Series> s;
    long rss_idle = 0, rss_formed = 0, rss_end = 0;
    std::uint64_t sweeps = 0;
};

void add(Series &s, const Round &r) {
    s.wall.push_back(r.t.total_ms);
    s.tail.push_back(r.t.tail_ms);
    s.cpu.push_back(r.cpu);
    s.service.push_back(r.service);
}

SizeResult run_size(const Options &o, std::size_t n, const std::string &secret) {
    SizeResult r;
    for (int k = 0; k < o.registrations; ++k) {
        Job job(o, n, secret);
        add(r.s["register"], job.register_all());
        if (k + 1 < o.registrations) continue;
        r.rss_idle = job.rss_idle();
        r.rss_formed = job.rss_formed();
        for (int i = 0; i < 3; ++i) job.boundary();  // warm-up
        for (int i = 0; i < o.reps; ++i) add(r.s["boundary"], job.boundary());
        for (int i = 0; i < o.reps; ++i) add(r.s["heartbeat"], job.heartbeat());
        for (int i = 0; i < o.reps; ++i) add(r.s["status"], job.status());
        for (int i = 0; i < o.reps; ++i) add(r.s["kv_get"], job.kv_get());
        for (int i = 0; i < o.changes; ++i) {
            auto [a, b] = job.shrink();
            if (o.announce) add(r.s["shrink-announce"], a);
            add(r.s["shrink"], b);
            auto [c, d] = job.grow();
            if (o.announce) add(r.s["grow-announce"], c);
            add(r.s["grow"], d);
        }
        for (int i = 0; i < o.changes; ++i) {
            add(r.s["lost"], job.lose_one());
            job.grow();
        }
        r.rss_end = job.rss_now();
        r.sweeps = job.sweeps();
    }
    return r;
}

void raise_fd_limit(std::size_t largest) {
    // Per rank: the bench's socket and notification fd, the coordinator's socket (both
    // processes inherit this limit), plus libzmq's own.
    const rlim_t need = largest * 4 + 256;
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur >= need) return;
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, std::max<rlim_t>(need, rl.rlim_cur));
    ::setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need)
        std::cerr << "coord_scale: open files limited to " << rl.rlim_cur << " (hard limit); " << need
                  << " are needed for " << largest << " ranks: raise it with ulimit -Hn as root\n";
}

Options parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--sizes") {
            o.sizes.clear();
            std::stringstream ss(next());
            for (std::string t; std::getline(ss, t, ',');) o.sizes.push_back(std::stoul(t));
        } else if (a == "--reps") {
            o.reps = std::stoi(next());
        } else if (a == "--changes") {
            o.changes = std::stoi(next());
        } else if (a == "--registrations") {
            o.registrations = std::max(1, std::stoi(next()));
        } else if (a == "--unit-size") {
            o.unit_size = static_cast<std::uint32_t>(std::stoul(next()));
        } else if (a == "--announce") {
            o.announce = next() != "no";
        } else if (a == "--log") {
            o.log = true;
        } else {
            throw std::runtime_error("usage: coord_scale [--sizes 16,64,256,1024] [--reps 20] [--changes 5] "
                                     "[--registrations 3] [--unit-size 4] [--announce yes|no] [--log]");
        }
    }
    for (auto n : o.sizes)
        if (o.unit_size == 0 || n % o.unit_size != 0 || n / o.unit_size < 2)
            throw std::runtime_error("every size must be at least two units of --unit-size ranks");
    return o;
}

// Exponent e of t ~ N^e between two sizes, and that of N log N over the same step.
double exponent(double t0, double t1, double n0, double n1) { return std::log(t1 / t0) / std::log(n1 / n0); }
double nlogn_exponent(double n0, double n1) { return exponent(n0 * std::log2(n0), n1 * std::log2(n1), n0, n1); }

}  // namespace

int main(int argc, char **argv) try {
    const Options o = parse(argc, argv);
    ::signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(*std::max_element(o.sizes.begin(), o.sizes.end()));
    auto secret = generate_secret();
    if (!secret) throw std::runtime_error(secret.error());

    std::vector<SizeResult> results;
    for (auto n : o.sizes) {
        std::cerr << "coord_scale: " << n << " ranks...\n";
        results.push_back(run_size(o, n, secret.value()));
    }

    const std::vector<std::string> phases = {"register", "boundary", "heartbeat", "kv_get", "status",
                                             "shrink-announce", "shrink",   "grow-announce", "grow", "lost"};
    std::printf("coordinator scale: unit size %u, announce %s, liveness on, %d rounds (%d changes) a size\n",
                o.unit_size, o.announce ? "yes" : "no", o.reps, o.changes);
    std::printf("ms: median [min-max] of wall (all sent -> all answered); tail (last arrival or lost report"
                " -> all answered);\ncoordinator CPU, all threads and the service thread alone (us/rank: a"
                " request's share of the service thread)\n");
    std::printf("%-16s %6s %24s %10s %10s %10s %11s\n", "phase", "ranks", "wall ms", "tail ms", "cpu ms",
                "svc ms", "svc us/rank");
    for (const auto &p : phases) {
        for (std::size_t k = 0; k < o.sizes.size(); ++k) {
            auto it = results[k].s.find(p);
            if (it == results[k].s.end()) continue;
            const auto &s = it->second;
            char range[64];
            std::snprintf(range, sizeof range, "%.2f [%.2f-%.2f]", median(s.wall), lo(s.wall), hi(s.wall));
            std::printf("%-16s %6zu %24s %10.2f %10.2f %10.2f %11.2f\n", p.c_str(), o.sizes[k], range,
                        median(s.tail), median(s.cpu), median(s.service),
                        median(s.service) * 1000 / double(o.sizes[k]));
        }
    }
    std::printf("\nmemory (coordinator process RSS, KiB): idle, formed, after the run; bytes a rank\n");
    for (std::size_t k = 0; k < o.sizes.size(); ++k) {
        const auto &r = results[k];
        std::printf("%6zu ranks: %ld %ld %ld  %.0f B/rank%s\n", o.sizes[k], r.rss_idle, r.rss_formed, r.rss_end,
                    double(r.rss_end - r.rss_idle) * 1024 / double(o.sizes[k]),
                    r.sweeps ? "  (missed notifications swept)" : "");
    }

    // Growth: exponent of the median between successive sizes, against N log N's. Judged on
    // the service thread's CPU time, the coordinator's serial cost: wall time on a machine
    // whose cores the ranks share moves with whatever else runs there.
    std::printf("\ngrowth exponent e (t ~ N^e) between sizes: wall, service CPU (N log N's)\n");
    bool growth_ok = true;
    for (const char *p : {"boundary", "shrink", "grow", "lost", "heartbeat"}) {
        std::printf("%-10s", p);
        for (std::size_t k = 1; k < o.sizes.size(); ++k) {
            const double n0 = double(o.sizes[k - 1]), n1 = double(o.sizes[k]);
            const auto &a = results[k - 1].s.at(p), &b = results[k].s.at(p);
            const double ew = exponent(median(a.wall), median(b.wall), n0, n1);
            const double es = exponent(median(a.service), median(b.service), n0, n1);
            std::printf("  %zu->%zu: %.2f %.2f (%.2f)", o.sizes[k - 1], o.sizes[k], ew, es, nlogn_exponent(n0, n1));
            // The last step, where fixed costs weigh least; 0.15 of slack for noise.
            if (k + 1 == o.sizes.size() && es > nlogn_exponent(n0, n1) + 0.15) growth_ok = false;
        }
        std::printf("\n");
    }

    const std::size_t big = o.sizes.size() - 1;
    auto worst = [&](std::initializer_list<const char *> ps, bool wall) {
        double m = 0;
        for (const char *p : ps) {
            const auto &s = results[big].s.at(p);
            m = std::max(m, median(wall ? s.wall : s.service));
        }
        return m;
    };
    const double bw = worst({"boundary"}, true), bs = worst({"boundary"}, false);
    const double rw = worst({"shrink", "grow", "lost"}, true), rs = worst({"shrink", "grow", "lost"}, false);
    std::printf("\ngoals at %zu ranks (wall; service thread CPU): boundary %.2f; %.2f ms (< 10: %s), "
                "reshape %.2f; %.2f ms (< 100: %s), growth no faster than N log N: %s\n",
                o.sizes[big], bw, bs, bw < 10 ? "met" : bs < 10 ? "met on the service thread only" : "NOT met", rw,
                rs, rw < 100 ? "met" : rs < 100 ? "met on the service thread only" : "NOT met",
                growth_ok ? "met" : "NOT met");
    return 0;
} catch (const std::exception &e) {
    std::cerr << "coord_scale: " << e.what() << "\n";
    return 1;
}
