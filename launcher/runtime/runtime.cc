// libomni's rank-side runtime; see runtime.h for the contract and runtime/handoff.h for the
// hand-off sequence.
#include "runtime/runtime.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <system_error>

#include "comm/gloo_store.h"
#include "comm/nccl.h"
#include "comm/pair_sockets.h"
#include "coord/client.h"
#include "coord/log.h"
#include "coord/secret.h"
#include "runtime/liveness.h"
#include "runtime/mp_wireup.h"
#include "runtime/solo.h"

namespace omni::launcher {

const char *to_string(Outcome o) {
    switch (o) {
    case Outcome::Continue: return "continue";
    case Outcome::Reshaped: return "reshaped";
    case Outcome::Rewind: return "rewind";
    case Outcome::Stop: return "stop";
    case Outcome::Left: return "left";
    }
    return "?";
}

namespace {

std::string u(std::uint64_t v) { return std::to_string(v); }

void log_info(const std::string &msg) { log_line(LogLevel::Info, "libomni", msg); }

bool contains(const std::vector<std::uint32_t> &v, std::uint32_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
}

// The new rank of the lowest-ranked member that was already in the old generation: the
// source of everything joiners receive.
std::optional<int> first_survivor(const Decision &d) {
    for (const Member &m : d.next.members)
        if (!contains(d.joining_units, m.unit)) return static_cast<int>(m.rank);
    return std::nullopt;
}

// The survivors of a planned reshape: for each new rank, its index among the members that
// were already in the old generation (new-rank order), or -1 for a joiner; and their count.
struct Survivors {
    std::vector<int> index;
    std::uint32_t count = 0;
};
Survivors survivors_of(const Decision &d) {
    Survivors s;
    for (const Member &m : d.next.members)
        s.index.push_back(contains(d.joining_units, m.unit) ? -1 : static_cast<int>(s.count++));
    return s;
}

// After an in-place re-partition (in_place_offset): the wanted part to the front, the rest
// dropped. The capacity stays: a rank never holds more than it did before the reshape.
void keep_in_place(std::vector<float> &v, const Repartition &plan, std::uint32_t me) {
    auto off = in_place_offset(plan, me);
    if (!off) return;
    const std::size_t n = plan.want[me].size();
    if (*off) std::memmove(v.data(), v.data() + *off, n * sizeof(float));
    v.resize(n);
}

// Phase 1's plan for a vector of `len` elements: each member of the old generation `old`
// holds its ZeRO-1 range of the old world; survivor i (new-rank order) wants
// zero1_range(len, i, survivors); leavers want nothing.
Repartition survivor_plan(const Decision &d, const Layout &old, const Survivors &sv, std::size_t len) {
    const auto world = static_cast<std::uint32_t>(old.members.size());
    Repartition plan;
    for (const Member &m : old.members) {
        plan.have.push_back(zero1_range(len, m.rank, world));
        auto nr = d.next.rank_of(m.unit, m.slot);
        plan.want.push_back(nr && sv.index[*nr] >= 0
                                ? zero1_range(len, static_cast<std::uint32_t>(sv.index[*nr]), sv.count)
                                : ShardRange{});
    }
    return plan;
}

// A buffer of n elements for vector i: the one prepare() made if it has that size (its
// pages already in), else a new one.
void take_spare(std::vector<std::vector<float>> &spares, std::size_t i, std::vector<float> &out,
                std::size_t n) {
    if (i < spares.size() && spares[i].size() == n) {
        out = std::move(spares[i]);
        spares[i] = {};
    } else {
        assign_zeroed(out, n);
    }
}

}  // namespace

Runtime::Runtime(const RuntimeOptions &o) : opts_(o) {}

Runtime::~Runtime() {
    // The heartbeat thread first: it may abort the communicators below.
    liveness_.reset();
    // The communicators go before the stores and the client they rendezvoused through, and
    // before the PMIx session.
    nccl_.reset();
    sp_.clear();
    dp_control_.reset();
    control_.reset();
    dp_store_.reset();
    store_.reset();
    mp_nccl_.reset();
    mp_control_.reset();
    client_.reset();
    pmix_.reset();
}

namespace {
constexpr std::int64_t kStopRequestTimeoutMs = 10000;  // and other one-off requests
volatile sig_atomic_t g_sigterm = 0;  // a held SIGTERM arrived (process-wide)
extern "C" void note_sigterm(int) { g_sigterm = 1; }
// A process the rank forks (a data-loader worker, a helper) is not a rank: it gets SIGTERM
// back as a fresh process has it, or the signal mask it inherits, and keeps across exec,
// would leave it unkillable by SIGTERM. (posix_spawn, and so glibc's system(), runs no
// fork handlers: its child keeps the mask.)
extern "C" void release_sigterm_in_child() {
    struct sigaction now {};
    if (sigaction(SIGTERM, nullptr, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == note_sigterm) {
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGTERM, &dfl, nullptr);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    }
    g_sigterm = 0;
}
}  // namespace

// Runtime::request_stop() says why SIGTERM is held, and how.
static void hold_sigterm() {
    struct sigaction old {};
    if (sigaction(SIGTERM, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO)) return;
    if (old.sa_handler != SIG_DFL && old.sa_handler != note_sigterm) return;
    struct sigaction sa {};
    sa.sa_handler = note_sigterm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    static std::once_flag atfork;
    std::call_once(atfork, [] { pthread_atfork(nullptr, nullptr, release_sigterm_in_child); });
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// A held SIGTERM: recorded by the handler, or pending because every thread blocks it (then
// taken, so that it cannot strike later).
static bool sigterm_arrived() {
    if (g_sigterm) return true;
    sigset_t pending;
    if (sigpending(&pending) != 0 || !sigismember(&pending, SIGTERM)) return false;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    const struct timespec now {0, 0};
    if (sigtimedwait(&set, nullptr, &now) == SIGTERM) g_sigterm = 1;
    return g_sigterm != 0;
}

Result<std::unique_ptr<Runtime>> Runtime::from_environment() {
    // Before PMIx starts its threads, so that they inherit the block (request_stop()).
    if (std::getenv(kEnvCoordAddr) || std::getenv(kEnvCoordSecret) || std::getenv(kEnvJobDir)) hold_sigterm();
    auto pmix = PmixSession::open();
    if (!pmix) return Error{pmix.error()};
    auto opts = runtime_options_from_env([](const char *n) { return std::getenv(n); },
                                         pmix.value()->identity());
    if (!opts) return Error{opts.error()};
    auto rt = create(opts.value(), pmix.value().get());
    if (!rt) return Error{rt.error()};
    rt.value()->keep_pmix(std::move(pmix).value());
    return rt;
}

void Runtime::keep_pmix(std::unique_ptr<PmixSession> session) { pmix_ = std::move(session); }

// Gloo writes to its TCP peers with plain send(): when a peer dies, the next write raises
// SIGPIPE, whose default action kills this rank too, and a single lost rank would take its
// neighbours down instead of letting them recover. Ignore it (the write then fails with
// EPIPE and Gloo reports the error), unless the program installed its own handler.
static void ignore_sigpipe() {
    struct sigaction old {};
    if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
        struct sigaction ign {};
        ign.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &ign, nullptr);
    }
}

Result<std::unique_ptr<Runtime>> Runtime::create(const RuntimeOptions &options,
                                                 const PmixSession *pmix) {
    std::unique_ptr<Runtime> rt(new Runtime(options));
    if (options.standalone) {
        if (options.mp != 1)
            return make_error("OMNI_MP=" + u(options.mp) + ": a standalone rank is a world of one; "
                              "model parallelism needs a job of units (omni-launch)");
        rt->control_ = make_solo_communicator();
        rt->mp_control_ = make_solo_communicator();
        rt->generation_ = 1;
        return rt;
    }
    ignore_sigpipe();
    hold_sigterm();
    auto cl = CoordinatorClient::connect(options.endpoint, options.secret);
    if (!cl) return Error{cl.error()};
    rt->client_ = std::move(cl).value();
    auto d = rt->client_->join(options.member_id, options.unit, options.slot,
                               options.join_timeout_ms, options.node);
    if (!d) return make_error("joining the coordinator at " + options.endpoint + " as unit " +
                              u(options.unit) + " slot " + u(options.slot) + ": " + d.error());
    const Decision &dec = d.value();
    auto me = dec.next.rank_of(options.unit, options.slot);
    if (me) {
        // The unit's MP group meets now, before the generation's communicator: through PMIx
        // its ranks need nobody else, and a joiner does it off the survivors' pause.
        rt->pmix_view_ = pmix;
        if (auto st = rt->connect_mp(dec.next.generation); !st) return Error{st.error()};
    }
    if (dec.kind == DecisionKind::Continue && me) {
        // An announced grow names this rank a step ahead (protocol.h): return now, with the
        // rank and world it is to have, so that the trainer builds and registers its state
        // during the announced step instead of in the survivors' pause; start() waits for
        // the admission itself.
        rt->announced_ = dec;
        rt->rank_ = *me;
        rt->world_ = dec.next.world;
        rt->generation_ = dec.next.generation;
        auto g = groups_of(dec.next, options.unit, options.slot, options.mp);
        if (!g) return Error{g.error()};
        rt->groups_ = g.value();
        log_info("rank " + u(rt->rank_) + " of " + u(rt->world_) + " in generation " +
                 u(rt->generation_) + " once the announced change applies (unit " +
                 u(options.unit) + " slot " + u(options.slot) + ")");
        if (auto st = rt->start_liveness(); !st) return Error{st.error()};
        return rt;
    }
    if (auto st = rt->admit(dec); !st) return Error{st.error()};
    if (auto st = rt->start_liveness(); !st) return Error{st.error()};
    return rt;
}

// The coordinator's answer to a join: this rank's generation, or why there is none.
Status Runtime::admit(const Decision &dec) {
    if (dec.kind == DecisionKind::Stop)
        return make_error("the job stopped before this rank was admitted (" + dec.reason + ")");
    const auto me = dec.next.rank_of(opts_.unit, opts_.slot);
    if (dec.kind != DecisionKind::Reshaped || !me)
        return make_error("the coordinator's admission has no rank for unit " + u(opts_.unit) +
                          " slot " + u(opts_.slot));
    admission_ = dec;
    // A joiner (admitted at a boundary, not at the formation) starts at that boundary's step.
    if (dec.generation > 0) step_ = dec.step;
    if (auto st = adopt(dec, *me); !st) return st;
    log_info("rank " + u(rank_) + " of " + u(world_) + " in generation " + u(generation_) +
             " (unit " + u(opts_.unit) + " slot " + u(opts_.slot) +
             (dec.generation > 0 ? ", joined a running job)" : ")"));
    return Status::success();
}

Error Runtime::usage_error(std::string message) {
    fault_ = Fault::usage;
    return Error{std::move(message)};
}

Status Runtime::start_liveness() {
    Liveness::Hooks hooks;
    hooks.generation = [this] { return live_generation_.load(); };
    hooks.abandon = [this](std::uint64_t g, bool unit_lost) { abort_generation(g, unit_lost); };
    auto l = Liveness::start(opts_.endpoint, opts_.secret, opts_.member_id, std::move(hooks));
    if (!l) return make_error("the heartbeat to the coordinator at " + opts_.endpoint + ": " + l.error());
    liveness_ = std::move(l).value();
    // A rank that is out (fenced, or cut off from the coordinator) stops waiting for replies.
    client_->set_cancel([this] { return fenced(); });  // on the trainer thread, like liveness_.reset()
    return Status::success();
}

// On the heartbeat thread: the trainer's thread may be inside an operation on any of these.
void Runtime::abort_generation(std::uint64_t generation, bool unit_lost) {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (live_generation_.load() != generation) return;  // the rank has moved on already
    for (Communicator *c : {control_.get(), dp_control_.get()})
        if (c) c->abort();
    for (auto &[degree, c] : sp_)
        if (c) c->abort();
    // The MP group is the unit's: it is gone only with a rank of this unit.
    if (unit_lost && mp_control_) mp_control_->abort();
    if (foreign_generation_ == generation && !foreign_.empty()) (void)shutdown_sockets(foreign_);
}

void Runtime::begin_foreign_sockets() {
    std::lock_guard<std::mutex> lock(comm_mu_);
    foreign_before_ = socket_inodes();
}

std::size_t Runtime::adopt_foreign_sockets(std::size_t expected) {
    std::set<ino_t> fresh;
    for (ino_t i : socket_inodes())
        if (!foreign_before_.count(i)) fresh.insert(i);
    auto found = connected_tcp_on(fresh, nullptr);
    // The program's own store calls (torch.distributed's rendezvous through omni_store_*) may
    // open a connection to the coordinator meanwhile: that one is no peer's.
    const std::string scheme = "tcp://";
    const std::string coordinator =
        opts_.endpoint.rfind(scheme, 0) == 0 ? opts_.endpoint.substr(scheme.size()) : opts_.endpoint;
    found = not_connected_to(found, coordinator);
    std::lock_guard<std::mutex> lock(comm_mu_);
    foreign_before_.clear();
    foreign_generation_ = generation_;
    if (found.size() != expected) {
        log_line(LogLevel::Info, "libomni",
                 "found " + std::to_string(found.size()) + " new connections (" + describe_sockets(found) +
                     ") where " + std::to_string(expected) + " were expected: the program's own group of generation " + u(generation_) +
                     " ends a hung peer's collectives at its own timeout, not when the peer is declared lost");
        foreign_.clear();
        return 0;
    }
    foreign_ = std::move(found);
    return foreign_.size();
}

bool Runtime::fenced() const { return liveness_ && liveness_->fenced(); }

Error Runtime::fenced_error() {
    fault_ = Fault::peer;
    if (liveness_ && liveness_->cut_off())
        return Error{"member '" + opts_.member_id + "' has had no reply from the coordinator for its liveness timeout " +
                     "(the coordinator is gone or out of reach, and has declared it lost if it is alive): it is out " +
                     "of the job and must exit without writing anything"};
    return Error{"member '" + opts_.member_id + "' was declared lost in generation " +
                 u(liveness_ ? liveness_->fenced_generation() : generation_) +
                 " and is fenced out: it must exit without writing anything"};
}

Status Runtime::check_member() {
    if (opts_.standalone || !client_) return Status::success();
    if (fenced()) return fenced_error();
    if (!liveness_ || liveness_->lease_fresh()) return Status::success();
    auto ack = client_->heartbeat(opts_.member_id, generation_, kStopRequestTimeoutMs);
    if (!ack) {
        fault_ = Fault::peer;
        return make_error("confirming this rank's membership with the coordinator: " + ack.error());
    }
    if (ack.value().fenced) {
        liveness_->note_fenced(ack.value().fenced_generation);
        abort_generation(live_generation_.load(), true);
        return fenced_error();
    }
    liveness_->note_ack();
    return Status::success();
}

void Runtime::abandon_collectives() {
    if (opts_.standalone || (!control_ && !dp_control_)) return;
    log_info("generation " + std::to_string(generation_) +
             ": a collective failed; closing this rank's connections of the generation");
    std::lock_guard<std::mutex> lock(comm_mu_);
    drop_generation_comms();
    abandoned_ = true;
}

void Runtime::drop_generation_comms() {
    sp_.clear();
    dp_control_.reset();
    control_.reset();
    dp_store_.reset();
    store_.reset();
}

Status Runtime::adopt(const Decision &d, std::uint32_t new_rank,
                      std::optional<Result<Connection>> prebuilt, bool nccl_grow) {
    abandoned_ = false;
    // The old NCCL communicator lives until the new one exists: a grow is made from it.
    auto g = groups_of(d.next, opts_.unit, opts_.slot, opts_.mp);
    if (!g) return Error{g.error()};
    std::unique_ptr<Communicator> old_nccl = std::move(nccl_);
    {
        std::lock_guard<std::mutex> lock(comm_mu_);
        drop_generation_comms();
        live_generation_ = d.next.generation;
    }
    generation_ = d.next.generation;
    world_ = d.next.world;
    layout_ = d.next;
    rank_ = new_rank;
    groups_ = g.value();
    dp_layout_ = dp_layout(layout_, groups_.mp_size, groups_.mp_rank);
    Result<Connection> c = prebuilt ? std::move(*prebuilt)
                                    : connect(generation_, rank_, world_, groups_, true,
                                              nccl_grow ? old_nccl.get() : nullptr);
    old_nccl.reset();
    if (!c) return Error{c.error()};
    std::lock_guard<std::mutex> lock(comm_mu_);
    store_ = std::move(c.value().store);
    dp_store_ = std::move(c.value().dp_store);
    control_ = std::move(c.value().control);
    dp_control_ = std::move(c.value().dp);
    nccl_ = std::move(c.value().nccl);
#ifdef HAVE_NCCL
    if (auto *n = dynamic_cast<NcclCommunicator *>(nccl_.get())) n->use_stream(cuda_stream_);
#endif
    return Status::success();
}

// Touches no member but opts_ and client_ (read), so that a survivor can build the next
// generation's communicator on another thread while it hands state over on the current one.
Result<Runtime::Connection> Runtime::connect(std::uint64_t generation, std::uint32_t rank,
                                             std::uint32_t world, const Groups &g, bool with_nccl,
                                             Communicator *nccl_parent) const {
    (void)with_nccl;  // without HAVE_NCCL there is only Gloo
    (void)nccl_parent;
    try {
        Connection c;
        c.store = std::make_unique<CoordinatorStore>(
            *client_, generation, std::chrono::milliseconds(opts_.comm_timeout_ms));
        const GlooOptions go = gloo_options();
        auto w = make_gloo_communicator(*c.store, static_cast<int>(rank), static_cast<int>(world), go);
        if (!w) return make_error("generation " + u(generation) + ": " + w.error());
        c.control = std::move(w).value();
        CoordinatorStore *dp_store = c.store.get();
        if (g.mp_size > 1) {
            // The DP group of MP index m: its own keys in the generation's store.
            c.dp_store = std::make_unique<CoordinatorStore>(
                *client_, generation, std::chrono::milliseconds(opts_.comm_timeout_ms),
                "dp" + u(g.mp_rank) + "/");
            dp_store = c.dp_store.get();
            auto dp = make_gloo_communicator(*c.dp_store, static_cast<int>(g.dp_rank),
                                             static_cast<int>(g.dp_size), go);
            if (!dp) return make_error("generation " + u(generation) + ": data-parallel group " +
                                       u(g.mp_rank) + ": " + dp.error());
            c.dp = std::move(dp).value();
        }
        (void)dp_store;  // only NCCL's unique id goes through it
#ifdef HAVE_NCCL
        if (opts_.backend == CommBackend::nccl && with_nccl) {
            // A fresh NCCL communicator per generation, its unique id under this generation's
            // keys; the Gloo one stays for the host-memory hand-off.
            NcclOptions no;
            no.device = opts_.cuda_device;
            no.timeout = std::chrono::milliseconds(opts_.comm_timeout_ms);
            auto n = make_nccl_communicator(*dp_store, "nccl-unique-id", static_cast<int>(g.dp_rank),
                                            static_cast<int>(g.dp_size), no, nccl_parent);
            if (!n) return make_error("generation " + u(generation) + ": " + n.error());
            c.nccl = std::move(n).value();
        }
#endif
        return c;
    } catch (const std::exception &e) {
        return make_error("generation " + u(generation) + ": building the communicator: " + e.what());
    }
}

GlooOptions Runtime::gloo_options() const {
    GlooOptions go;
    go.hostname = opts_.gloo_host;
    go.timeout = std::chrono::milliseconds(opts_.comm_timeout_ms);
    go.same_host_copy = opts_.same_host_copy ? SameHostCopy::on : SameHostCopy::off;
    go.hold_before_connect = std::chrono::milliseconds(opts_.gloo_hold_ms);
    return go;
}

Result<Communicator *> Runtime::sp_comm(std::uint32_t degree) {
    const std::uint32_t d = groups_.dp_size;
    if (degree == 0 || (degree & (degree - 1)) || d % degree)
        return usage_error("sp_comm: degree " + u(degree) + ": expected a power of two that divides the DP size " +
                           u(d));
    if (!has_comm()) return usage_error("sp_comm: no communicator before start()");
    auto found = sp_.find(degree);
    if (found != sp_.end()) return found->second.get();
    if (degree == 1) {
        std::lock_guard<std::mutex> lock(comm_mu_);
        return (sp_[degree] = make_solo_communicator()).get();
    }
    // The aligned block of this rank's MP index: its own keys in the generation's store, so
    // that blocks, degrees and MP indices rendezvous apart.
    const std::uint32_t block = groups_.dp_rank / degree;
    fault_ = Fault::peer;  // a rendezvous that fails is a peer's doing
    try {
        CoordinatorStore store(*client_, generation_, std::chrono::milliseconds(opts_.comm_timeout_ms),
                               "sp" + u(degree) + "m" + u(groups_.mp_rank) + "b" + u(block) + "/");
        auto c = make_gloo_communicator(store, static_cast<int>(groups_.dp_rank % degree), static_cast<int>(degree),
                                        gloo_options());
        if (!c)
            return make_error("sp_comm: generation " + u(generation_) + ", the group of DP ranks " +
                              u(block * degree) + ".." + u(block * degree + degree - 1) + ": " + c.error());
        std::lock_guard<std::mutex> lock(comm_mu_);
        return (sp_[degree] = std::move(c).value()).get();
    } catch (const std::exception &e) {
        return make_error("sp_comm: generation " + u(generation_) + ": " + e.what());
    }
}

Communicator &Runtime::comm() { return nccl_ ? *nccl_ : dp_control(); }
Communicator &Runtime::mp_comm() { return mp_nccl_ ? *mp_nccl_ : *mp_control_; }
Communicator &Runtime::world_comm() { return *control_; }

Status Runtime::connect_mp(std::uint64_t generation) {
    const std::uint32_t m = opts_.mp;
    if (m <= 1) {
        mp_control_ = make_solo_communicator();
        return Status::success();
    }
    const std::uint32_t replica = opts_.slot / m, mp_rank = opts_.slot % m;
    const std::string group = "unit " + u(opts_.unit) + " replica " + u(replica);
    const ProcessIdentity &p = opts_.process;
    // Through PMIx when this process's step holds its whole unit in slot order (omni-launch
    // starts one step per unit): one exchange of Gloo pair addresses, fenced over the group
    // when the unit sits on this node and over the step when the unit spans nodes and the
    // step is just the unit (mp_wireup.h says why). Else through the coordinator, or an error
    // where OMNI_MP_WIREUP=pmix. Every rank of the unit reaches the same answer.
    std::vector<std::uint32_t> procs;
    for (std::uint32_t i = 0; i < m; ++i) procs.push_back(p.rank - mp_rank + i);
    const bool holds_unit = pmix_view_ && !pmix_view_->nspace().empty() && p.from_pmix && p.rank >= opts_.slot &&
                            p.rank - opts_.slot + opts_.unit_size <= p.size;
    bool unit_on_node = false;
    if (holds_unit) {
        const std::vector<std::uint32_t> local = pmix_view_->local_peers();
        unit_on_node = true;
        for (std::uint32_t r = p.rank - opts_.slot; r < p.rank - opts_.slot + opts_.unit_size; ++r)
            if (std::find(local.begin(), local.end(), r) == local.end()) unit_on_node = false;
    }
    const bool step_is_unit = holds_unit && p.size == opts_.unit_size;
    const bool via_pmix = opts_.mp_wireup != "coordinator" && (unit_on_node || step_is_unit);
    if (opts_.mp_wireup == "pmix" && !via_pmix)
        return make_error("the model-parallel group of " + group +
                          ": OMNI_MP_WIREUP=pmix, but this process's srun step " +
                          (holds_unit ? "spans nodes and holds more than its unit of " + u(opts_.unit_size) + " ranks"
                                      : "does not hold its whole unit under PMIx") +
                          " (omni-launch starts one step per unit)");
    const FenceScope scope = unit_on_node ? FenceScope::group : FenceScope::namespace_;
    const auto timeout = std::chrono::milliseconds(opts_.comm_timeout_ms);
    const GlooOptions go = gloo_options();
    try {
        Result<std::unique_ptr<Communicator>> c = make_error("no rendezvous");
        if (via_pmix) {
            const std::string nspace = pmix_view_->nspace(), key = "omni.mp." + u(opts_.unit) + "." + u(replica);
            c = make_gloo_communicator(
                [&](const std::vector<char> &mine) { return pmix_exchange(nspace, procs, key, mine, timeout, scope); },
                static_cast<int>(mp_rank), static_cast<int>(m), go);
        } else {
            CoordinatorStore store(*client_, generation, timeout, "mp-u" + u(opts_.unit) + "r" + u(replica) + "/");
            c = make_gloo_communicator(store, static_cast<int>(mp_rank), static_cast<int>(m), go);
        }
        if (!c) return make_error("the model-parallel group of " + group + ": " + c.error());
        mp_control_ = std::move(c).value();
#ifdef HAVE_NCCL
        if (opts_.backend == CommBackend::nccl) {
            // The unique id travels over the group's Gloo communicator just made.
            BroadcastStore bs(*mp_control_, 4096);
            NcclOptions no;
            no.device = opts_.cuda_device;
            no.timeout = timeout;
            auto n = make_nccl_communicator(bs, "mp-nccl-unique-id", static_cast<int>(mp_rank),
                                            static_cast<int>(m), no);
            if (!n) return make_error("the model-parallel group of " + group + ": " + n.error());
            mp_nccl_ = std::move(n).value();
            if (auto *nc = dynamic_cast<NcclCommunicator *>(mp_nccl_.get())) nc->use_stream(cuda_stream_);
        }
#endif
    } catch (const std::exception &e) {
        return make_error("the model-parallel group of " + group + ": " + e.what());
    }
    log_info("model-parallel group of " + group + ": rank " + u(mp_rank) + " of " + u(m) +
             (!via_pmix      ? " (wired up through the coordinator)"
              : unit_on_node ? " (wired up through PMIx on this node)"
                             : " (wired up through PMIx across the unit's nodes)"));
    return Status::success();
}

Status Runtime::set_cuda_stream(void *stream) {
#ifdef HAVE_NCCL
    if (opts_.backend == CommBackend::nccl && !opts_.standalone) {
        // Before start() it waits for the first communicator (adopt()).
        cuda_stream_ = stream;
        if (auto *n = dynamic_cast<NcclCommunicator *>(nccl_.get())) n->use_stream(stream);
        if (auto *n = dynamic_cast<NcclCommunicator *>(mp_nccl_.get())) n->use_stream(stream);
        return Status::success();
    }
#endif
    if (stream)
        return usage_error("set_cuda_stream: this rank communicates over host buffers (" +
                           std::string(opts_.standalone ? "a single rank without a coordinator" : "gloo") +
                           "); a CUDA stream needs OMNI_COMM_BACKEND=nccl");
    return Status::success();
}

Status Runtime::register_params(float *data, std::size_t count) {
    if (!data && count) return make_error("register_params: NULL buffer of " + u(count) + " floats");
    params_ = data;
    param_count_ = count;
    return Status::success();
}

Result<std::size_t> Runtime::register_shard(std::vector<float> *storage, std::size_t length) {
    if (!storage) return make_error("register_shard: storage is NULL");
    if (shards_.size() >= kMaxShardVectors)
        return make_error("register_shard: at most " + u(kMaxShardVectors) + " vectors");
    if (started_) return make_error("register_shard: register before start()");
    for (const Shard &s : shards_)
        if (s.storage == storage) return make_error("register_shard: vector registered twice");
    const ShardRange r = shard_range(length);
    if (storage->size() != r.size()) assign_zeroed(*storage, r.size());
    shards_.push_back({storage, length});
    return shards_.size() - 1;
}

Status Runtime::configure_ledger(LedgerConfig cfg) {
    // Before start() the job's position is step 0 for a forming job, and a joiner's ledger
    // is replaced by the survivors' in start(); later, restore_ledger() is the way.
    if (started_) return make_error("configure_ledger: configure before start()");
    if (!cfg.global_batch) cfg.global_batch = opts_.job.global_batch.value_or(1);
    if (!cfg.micro_batch) cfg.micro_batch = opts_.job.micro_batch.value_or(1);
    auto l = Ledger::create(cfg, groups_.dp_size);
    if (!l) return Error{l.error()};
    ledger_ = std::move(l).value();
    return Status::success();
}

Status Runtime::restore_ledger(std::string_view json) {
    auto l = Ledger::load(json);
    if (!l) return Error{l.error()};
    // A configured ledger is the run's own choice of batch geometry: the checkpoint must
    // agree on the data order, and the run's micro-batch wins.
    auto st = ledger_ ? l.value().resume_as(ledger_->config(), groups_.dp_size)
                      : l.value().resize(groups_.dp_size);
    if (!st) return st;
    ledger_ = std::move(l).value();
    return Status::success();
}

Status Runtime::configure_balance(const BalanceOptions &options, CostFn cost) {
    if (options.active() && !cost) return usage_error("configure_balance: policy " + balance_name(options) +
                                                      " needs a cost function");
    // A step already planned keeps its plan: one step is never split two ways.
    balance_ = options;
    cost_ = std::move(cost);
    return Status::success();
}

const StepPlan *Runtime::step_plan() const {
    if (!plan_ || !ledger_ || plan_->step != ledger_->step() || plan_->generation != generation_) return nullptr;
    return &*plan_;
}

std::uint64_t Runtime::node_key() const {
    if (const char *n = std::getenv("SLURMD_NODENAME"); n && *n) return locality_key(n);
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    return locality_key(host);
}

Result<const StepPlan *> Runtime::plan() {
    if (!ledger_) return usage_error("plan: no ledger configured");
    if (const StepPlan *p = step_plan()) return p;
    if (!balance_.active()) return usage_error("plan: no balance policy configured");
    if (!started_) return usage_error("plan: balancing needs start() first");
    if (ledger_->config().global_batch > balance::kMaxSamples)
        return usage_error("plan: balancing takes at most " + std::to_string(balance::kMaxSamples) +
                           " samples a step; the global batch is " + std::to_string(ledger_->config().global_batch));
    auto share = ledger_->share(groups_.dp_rank);
    if (!share) return usage_error(share.error());
    auto made = plan_record(node_key(), share.value(), ledger_->step(), cost_);
    if (!made) return usage_error(made.error());
    std::vector<std::uint64_t> rec = std::move(made).value();
    // The replica's M ranks plan in M DP groups: they take MP rank 0's record (its node
    // and its costs), so that every DP group plans the same split whatever the cost
    // function returned on each rank.
    if (groups_.mp_size > 1) {
        fault_ = Fault::peer;
        if (auto st = mp_control_->broadcast(rec.data(), rec.size(), DType::i64, 0); !st)
            return make_error("balance: the replica's costs from its MP rank 0: " + st.error());
    }
    const std::uint32_t d = groups_.dp_size;
    std::vector<std::uint64_t> gathered(rec.size() * d);
    if (d > 1) {
        fault_ = Fault::peer;
        if (auto st = dp_control().allgather(rec.data(), gathered.data(), rec.size(), DType::i64); !st)
            return make_error("balance: all-gather of the step's costs: " + st.error());
    } else {
        gathered = rec;
    }
    auto p = plan_step(ledger_->step_samples(), gathered, d, groups_.dp_rank, balance_);
    if (!p) return usage_error(p.error());
    p.value().step = ledger_->step();
    p.value().generation = generation_;
    // Every replica has the plan; one says it.
    if (p.value().over_memory && groups_.dp_rank == 0 && groups_.mp_rank == 0)
        log_line(LogLevel::Warning, "libomni",
                 "step " + std::to_string(ledger_->step() + 1) + ": " + std::to_string(p.value().over_memory) +
                     " sample(s) exceed the LSSP memory limit of " +
                     std::to_string(balance_.lssp_options.memory_tokens) +
                     " tokens even split over the largest degree; planned over it all the same");
    plan_ = std::move(p).value();
    return &*plan_;
}

Result<std::vector<std::uint64_t>> Runtime::micro_batch(std::uint32_t micro) {
    if (!ledger_) return usage_error("micro_batch: no ledger configured");
    if (micro >= ledger_->grad_accum())
        return usage_error("micro_batch: micro-step " + std::to_string(micro) + " is outside 0.." +
                           std::to_string(ledger_->grad_accum() - 1) + " (GA)");
    if (!step_plan() && !balance_.active()) {
        auto v = ledger_->micro_batch(groups_.dp_rank, micro);
        if (!v) return usage_error(v.error());
        return v;
    }
    auto p = plan();
    if (!p) return Error{p.error()};
    if (p.value()->lssp)
        return usage_error(
            "micro_batch: an LSSP plan gives replicas unequal work; read it with plan() (C: omni_data_step_samples)");
    const std::uint64_t b = ledger_->config().micro_batch;
    const auto first = p.value()->samples.begin() + static_cast<std::ptrdiff_t>(micro * b);
    return std::vector<std::uint64_t>(first, first + static_cast<std::ptrdiff_t>(b));
}

Status Runtime::check_state_for(std::uint32_t dp_size) const {
    if (!ledger_) return Status::success();
    auto ga = derive_grad_accum(ledger_->config().global_batch, ledger_->config().micro_batch,
                                dp_size);
    if (!ga) return Error{ga.error()};
    return Status::success();
}

// A joiner that create() returned early (an announced grow) waits here for its admission:
// the change as announced, or a later one that admits its unit.
Status Runtime::await_admission() {
    while (announced_) {
        auto d = client_->join(opts_.member_id, opts_.unit, opts_.slot, opts_.join_timeout_ms,
                               opts_.node);
        if (!d) return make_error("waiting for admission at the coordinator: " + d.error());
        if (d.value().kind == DecisionKind::Continue) continue;  // announced again: wait on
        announced_.reset();
        // Storage registered for the announced range is resized by the hand-off if the
        // change differs from the announcement.
        if (auto st = admit(d.value()); !st) return st;
    }
    return Status::success();
}

Result<StartResult> Runtime::start() {
    fault_ = Fault::peer;  // unless a usage error below says otherwise
    if (started_) return usage_error("start: already started");
    if (auto st = await_admission(); !st) return Error{st.error()};
    StartResult r;
    r.joined = admission_ && admission_->generation > 0;
    r.rewind = r.joined && admission_->rewind;
    if (r.joined && !r.rewind) {
        if (auto st = receive_as_joiner(); !st) return Error{st.error()};
    }
    if (!opts_.standalone) report_ready();
    started_ = true;
    r.step = step_;
    return r;
}

// Tells the coordinator that this rank's part of the change that made its generation is
// done, so that the change's pause is known there (omni-launch's events). A failure is
// only logged: the next boundary finds out whether the coordinator is really gone.
void Runtime::report_ready() {
    if (auto st = client_->ready(opts_.member_id, generation_, opts_.comm_timeout_ms); !st)
        log_line(LogLevel::Warning, "libomni", "reporting the end of the pause: " + st.error());
}

Status Runtime::check_header(const Decision &d, const std::string &text) {
    auto h = decode_header(text);
    if (!h) return Error{h.error()};
    const HandoffHeader &hd = h.value();
    // Sizes come from our own registration; the header must agree with it.
    if (hd.params != param_count_ || hd.shard_lengths.size() != shards_.size())
        return usage_error("start: the survivors hold " + u(hd.params) + " parameters and " +
                          u(hd.shard_lengths.size()) + " optimizer vectors, this rank registered " +
                          u(param_count_) + " and " + u(shards_.size()));
    for (std::size_t i = 0; i < shards_.size(); ++i)
        if (hd.shard_lengths[i] != shards_[i].length)
            return usage_error("start: optimizer vector " + u(i) + " has length " +
                              u(hd.shard_lengths[i]) + " on the survivors, " +
                              u(shards_[i].length) + " here");
    if (hd.generation != generation_ || hd.step != d.step)
        return make_error("start: hand-off for generation " + u(hd.generation) + " step " +
                          u(hd.step) + ", expected generation " + u(generation_) + " step " +
                          u(d.step));
    if (hd.has_ledger) {
        auto l = Ledger::load(hd.ledger);
        if (!l) return make_error("start: the survivors' ledger: " + l.error());
        if (ledger_) {
            const LedgerConfig &a = ledger_->config(), &b = l.value().config();
            if (a.dataset_size != b.dataset_size || a.global_batch != b.global_batch ||
                a.micro_batch != b.micro_batch || a.seed != b.seed)
                return usage_error("start: this rank's ledger configuration differs from the "
                                  "survivors' (dataset, batch sizes or seed)");
        }
        ledger_ = std::move(l).value();
    } else if (ledger_) {
        return usage_error("start: this rank configured a ledger, the survivors have none");
    }
    step_ = hd.step;
    return Status::success();
}

Status Runtime::receive_as_joiner() {
    const Decision &d = *admission_;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<float>> none(shards_.size());
    if (auto st = hand_over(dp_decision(d, opts_.mp, groups_.mp_rank), none); !st) return st;
    log_info("generation " + u(generation_) + ": received " + u(param_count_) +
             " parameters and " + u(shards_.size()) + " optimizer vectors at step " + u(step_) +
             " in " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - t0).count()) + " ms");
    return Status::success();
}

// The buffers a survivor's hand-off will allocate (runtime/handoff.h): the phase-1 range
// where it does not lie inside what the rank holds, and the phase-2 one likewise. Same plans
// as gather_on_survivors() and hand_over(), sizes only.
Status Runtime::prepare(const Decision &d) {
    // Every member of the generation warms the connections phase 1 will use: up to 2 MiB
    // over each pair that will move data, so that TCP has grown its window and buffers
    // before the hand-off instead of during it (one exchange on every rank, possibly empty).
    if (!shards_.empty() && dp_layout_.members.size() == groups_.dp_size) {
        const Repartition plan = survivor_plan(d, dp_layout_, survivors_of(d), shards_[0].length);
        auto mine = plan_repartition(plan, groups_.dp_rank);
        if (!mine) return Error{mine.error()};
        constexpr std::size_t kWarm = (2u << 20) / sizeof(float);
        std::vector<PeerSend> sends;
        std::vector<PeerRecv> recvs;
        std::vector<std::vector<float>> sink;
        for (const auto &mv : mine.value().sends)
            sends.push_back({mv.peer, shards_[0].storage->data(), std::min(mv.range.size(), kWarm) * sizeof(float)});
        for (const auto &mv : mine.value().recvs) {
            sink.emplace_back(std::min(mv.range.size(), kWarm));
            recvs.push_back({mv.peer, sink.back().data(), sink.back().size() * sizeof(float)});
        }
        // Only an optimisation: a failure (a peer that just died) is for the next boundary
        // to find out, where it becomes a rewind instead of failing this one.
        if (auto st = dp_control().exchange(sends, recvs); !st)
            log_line(LogLevel::Warning, "libomni", "warming up for the announced change: " + st.error());
    }
    spare_.assign(shards_.size(), {});
    spare_next_.assign(shards_.size(), {});
    const auto nr = d.next.rank_of(opts_.unit, opts_.slot / opts_.mp);
    if (!nr) return Status::success();  // leaving: nothing to receive
    const Survivors sv = survivors_of(d);
    if (*nr >= sv.index.size() || sv.index[*nr] < 0) return Status::success();
    const auto idx = static_cast<std::uint32_t>(sv.index[*nr]);
    for (std::size_t i = 0; i < shards_.size(); ++i) {
        const std::size_t len = shards_[i].length;
        const ShardRange have = zero1_range(len, groups_.dp_rank, groups_.dp_size), mid = zero1_range(len, idx, sv.count);
        if (mid.size() && !(mid.begin >= have.begin && mid.end <= have.end))
            assign_zeroed(spare_[i], mid.size());
        if (d.joining_units.empty()) continue;
        const ShardRange fin = zero1_range(len, *nr, d.next.world);
        if (fin.size() && !(fin.begin >= mid.begin && fin.end <= mid.end))
            assign_zeroed(spare_next_[i], fin.size());
    }
    return Status::success();
}

Result<std::vector<std::vector<float>>> Runtime::gather_on_survivors(const Decision &d) {
    const Survivors sv = survivors_of(d);
    if (dp_layout_.members.size() != groups_.dp_size)
        return make_error("the old generation's layout has " + u(dp_layout_.members.size()) +
                          " members for a world of " + u(groups_.dp_size));
    std::vector<Repartition> plans(shards_.size());
    std::vector<std::vector<float>> held(shards_.size());
    std::vector<RepartitionJob> jobs;
    for (std::size_t i = 0; i < shards_.size(); ++i) {
        plans[i] = survivor_plan(d, dp_layout_, sv, shards_[i].length);
        jobs.push_back({&plans[i], shards_[i].storage->data(), nullptr});
        if (auto off = in_place_offset(plans[i], groups_.dp_rank)) {
            // Without leavers every survivor keeps what it has: no copy, no new pages.
            held[i] = std::move(*shards_[i].storage);
            jobs.back().dst = held[i].data() + *off;
        } else {
            take_spare(spare_, i, held[i], plans[i].want[groups_.dp_rank].size());
            jobs.back().dst = held[i].data();
        }
    }
    // Every vector in one round of transfers.
    if (auto st = repartition(dp_control(), jobs); !st) return Error{st.error()};
    for (std::size_t i = 0; i < shards_.size(); ++i) keep_in_place(held[i], plans[i], groups_.dp_rank);
    return held;
}

Status Runtime::hand_over(const Decision &d, std::vector<std::vector<float>> &held) {
    auto root = first_survivor(d);
    if (!root) return make_error("hand-off: no survivor to receive the state from");
    Communicator &c = dp_control();
    const Survivors sv = survivors_of(d);
    const bool joiner = sv.index[groups_.dp_rank] < 0;
    std::string text;
    if (static_cast<std::uint32_t>(*root) == groups_.dp_rank) {
        HandoffHeader h;
        h.step = d.step;
        h.generation = generation_;
        h.params = param_count_;
        for (const Shard &s : shards_) h.shard_lengths.push_back(s.length);
        h.has_ledger = ledger_.has_value();
        if (ledger_) h.ledger = ledger_->serialise();
        text = encode_header(h);
    }
    if (auto st = broadcast_bytes(c, text, *root, kMaxHandoffHeaderBytes); !st) return st;
    // A joiner whose registration disagrees stops here; the survivors then fail on the
    // transfers below within comm_timeout_ms (libomni(3)).
    if (joiner)
        if (auto st = check_header(d, text); !st) return st;
    // Parameters: survivor i offers its 1/s of them; each joiner wants all. Optimizer
    // vectors: from the survivor layout to the new one. All in one round of transfers.
    std::vector<Repartition> plans(1 + shards_.size());
    for (std::uint32_t r = 0; r < groups_.dp_size; ++r) {
        const bool surv = sv.index[r] >= 0;
        const auto idx = static_cast<std::uint32_t>(surv ? sv.index[r] : 0);
        plans[0].have.push_back(surv ? zero1_range(param_count_, idx, sv.count) : ShardRange{});
        plans[0].want.push_back(surv ? ShardRange{} : ShardRange{0, param_count_});
        for (std::size_t i = 0; i < shards_.size(); ++i) {
            plans[1 + i].have.push_back(surv ? zero1_range(shards_[i].length, idx, sv.count) : ShardRange{});
            plans[1 + i].want.push_back(zero1_range(shards_[i].length, r, groups_.dp_size));
        }
    }
    std::vector<RepartitionJob> jobs;
    // A survivor's own range of the (replicated) parameters is already in place.
    jobs.push_back({&plans[0], params_ ? params_ + plans[0].have[groups_.dp_rank].begin : nullptr,
                    joiner ? params_ : nullptr});
    // Where each vector's new range lands: in place in what this rank holds, straight into
    // a joiner's registered storage (sized for this generation, its pages touched before it
    // joined), or else a new buffer.
    enum class Dest { in_place, storage, fresh };
    std::vector<Dest> dest(shards_.size());
    std::vector<std::vector<float>> fresh(shards_.size());
    for (std::size_t i = 0; i < shards_.size(); ++i) {
        const Repartition &p = plans[1 + i];
        if (held[i].size() != p.have[groups_.dp_rank].size())
            return make_error("hand-off: this rank holds " + u(held[i].size()) +
                              " elements of optimizer vector " + u(i) + ", expected " +
                              u(p.have[groups_.dp_rank].size()));
        jobs.push_back({&p, held[i].data(), nullptr});
        if (auto off = in_place_offset(p, groups_.dp_rank)) {
            dest[i] = Dest::in_place;
            jobs.back().dst = held[i].data() + *off;
        } else if (joiner) {
            dest[i] = Dest::storage;
            if (shards_[i].storage->size() != p.want[groups_.dp_rank].size())
                assign_zeroed(*shards_[i].storage, p.want[groups_.dp_rank].size());
            jobs.back().dst = shards_[i].storage->data();
        } else {
            dest[i] = Dest::fresh;
            take_spare(spare_next_, i, fresh[i], p.want[groups_.dp_rank].size());
            jobs.back().dst = fresh[i].data();
        }
    }
    if (auto st = repartition(c, jobs); !st) return make_error("parameters and optimizer state: " + st.error());
    for (std::size_t i = 0; i < shards_.size(); ++i) {
        if (dest[i] == Dest::in_place) {
            keep_in_place(held[i], plans[1 + i], groups_.dp_rank);
            *shards_[i].storage = std::move(held[i]);
        } else if (dest[i] == Dest::fresh) {
            *shards_[i].storage = std::move(fresh[i]);
        }
    }
    return Status::success();
}

Result<BoundaryResult> Runtime::boundary(std::uint64_t step) {
    fault_ = Fault::peer;  // unless a usage error below says otherwise
    if (!started_) return usage_error("boundary: call start() first");
    if (finished_) return usage_error("boundary: this rank has stopped or left the job");
    if (ledger_) {
        if (ledger_->step() + 1 == step) {
            if (auto st = ledger_->commit_step(); !st) return usage_error(st.error());
        } else if (ledger_->step() != step) {
            return usage_error("boundary: step " + u(step) + ", but the ledger has committed " +
                              u(ledger_->step()) + " steps (expected step " +
                              u(ledger_->step() + 1) + ")");
        }
    }
    BoundaryResult res;
    res.previous_world = world_;
    auto finish = [&](Outcome o) {
        res.outcome = o;
        res.generation = generation_;
        res.world = world_;
        res.rank = rank_;
        res.grad_accum = ledger_ ? ledger_->grad_accum() : 0;
        return res;
    };
    if (opts_.standalone) {
        step_ = step;
        return finish(Outcome::Continue);
    }
    if (fenced()) return fenced_error();

    if (!stop_requested_ && sigterm_arrived()) {
        if (auto st = request_stop("SIGTERM to rank " + u(rank_)); !st)
            log_line(LogLevel::Warning, "libomni", "SIGTERM: asking the coordinator to stop the job: " + st.error());
        else if (rank_ == 0)
            log_info("SIGTERM: the job stops at the boundary after step " + u(step));
    }
    // The ledger's geometry lets the coordinator keep every world one whose GA is whole.
    BatchGeometry batch;
    if (ledger_) batch = {ledger_->config().global_batch, ledger_->config().micro_batch, opts_.mp};
    else batch.mp = opts_.mp;
    auto got = client_->boundary(opts_.member_id, generation_, step, opts_.boundary_timeout_ms, batch);
    if (!got) {
        if (fenced()) return fenced_error();  // gave up waiting: out of the job meanwhile
        return make_error("boundary after step " + u(step) + ": " + got.error());
    }
    // A rank stopped long enough to be declared lost may find an old decision waiting in its
    // socket when it resumes: it must not act on it (Liveness::lease_fresh).
    if (auto st = check_member(); !st) return Error{st.error()};
    const Decision &d = got.value();
    step_ = step;
    res.reason = d.reason;
    res.leaving_units = d.leaving_units;
    res.joining_units = d.joining_units;
    res.lost = d.lost;
    if (d.kind == DecisionKind::Continue) {
        if (d.next.world > 0) {  // a planned change announced for the next boundary
            if (auto st = prepare(dp_decision(d, opts_.mp, groups_.mp_rank)); !st) return make_error("boundary after step " + u(step) + ": " + st.error());
        }
        return finish(Outcome::Continue);
    }
    if (d.kind == DecisionKind::Stop) {
        finished_ = true;
        return finish(Outcome::Stop);
    }

    const auto new_rank = d.next.rank_of(opts_.unit, opts_.slot);
    const std::uint64_t old_generation = generation_;
    if (!d.rewind) {
        // Planned: refuse a world the global batch does not divide before anything moves
        // (every rank computes the same answer, so all of them stop here together).
        if (auto st = check_state_for(d.next.world / opts_.mp); !st)
            return usage_error("boundary: generation " + u(d.next.generation) + " of " +
                              u(d.next.world) + " ranks: " + st.error());
    }
    // The hand-off's view: this rank's DP group, old (dp_layout_) and new (pd.next).
    const Decision pd = dp_decision(d, opts_.mp, groups_.mp_rank);
    std::optional<Groups> new_groups;
    if (new_rank) {
        auto g = groups_of(d.next, opts_.unit, opts_.slot, opts_.mp);
        if (!g) return make_error("boundary: " + g.error());
        new_groups = g.value();
    }
    // Phase times, logged with the change: where a slow resize spends its pause.
    using Clock = std::chrono::steady_clock;
    const auto ms_since = [](Clock::time_point t) {
        return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
    };
    const auto t_decided = Clock::now();
    // A survivor of a planned reshape connects to the next generation on another thread
    // while phase 1 runs on the current communicator (rendezvous is mostly waiting).
    // NCCL on a planned pure shrink: the survivors shrink the communicator they have
    // (ncclCommShrink, NCCL 2.27+) instead of a fresh init; the leavers take no part.
#ifdef HAVE_NCCL
    const bool nccl_shrink = nccl_ && !d.rewind && d.joining_units.empty() && new_rank &&
                             nccl_has_shrink();
#else
    const bool nccl_shrink = false;
#endif
    // NCCL on a planned pure grow: the survivors grow theirs (ncclCommGrow, NCCL 2.29+, where
    // rank 0's library has it; make_nccl_communicator) and keep their connections.
    const bool nccl_grow = nccl_ && !d.rewind && d.leaving_units.empty() &&
                           !d.joining_units.empty() && new_rank;
    std::future<Result<Connection>> next;
    if (!d.rewind && new_rank) {
        try {
            next = std::async(std::launch::async,
                              [this, g = d.next.generation, r = *new_rank, w = d.next.world,
                               groups = *new_groups, nccl = !nccl_shrink,
                               parent = nccl_grow ? nccl_.get() : nullptr] {
                                  return connect(g, r, w, groups, nccl, parent);
                              });
        } catch (const std::system_error &) {
            // No thread to spare: adopt() connects after phase 1 instead.
        }
    }
    std::vector<std::vector<float>> held;
    if (!d.rewind) {
        // Phase 1 on the old communicator: leavers hand their shards to the survivors.
        auto h = gather_on_survivors(pd);
        if (!h) return make_error("boundary: generation " + u(old_generation) + ": " + h.error());
        held = std::move(h).value();
    }
    if (!new_rank) {
        // No longer a member: its heartbeats would be refused. Before the lock, which the
        // heartbeat thread may be waiting for.
        liveness_.reset();
        std::lock_guard<std::mutex> lock(comm_mu_);
        nccl_.reset();
        dp_control_.reset();
        control_.reset();
        dp_store_.reset();
        store_.reset();
        mp_nccl_.reset();
        mp_control_.reset();
        finished_ = true;
        log_info("unit " + u(opts_.unit) + " leaves at step " + u(step) + " (" + d.reason + ")");
        return finish(Outcome::Left);
    }
#ifdef HAVE_NCCL
    // After a loss NCCL operations may hang on the dead peer: abort instead of a clean free.
    if (d.rewind && nccl_)
        if (auto *n = dynamic_cast<NcclCommunicator *>(nccl_.get())) n->abort();
#endif
    const std::string phase1_ms = ms_since(t_decided);
    const auto t_adopt = Clock::now();
    std::optional<Result<Connection>> prebuilt;
    if (next.valid()) prebuilt = next.get();
#ifdef HAVE_NCCL
    if (nccl_shrink && prebuilt && prebuilt->ok()) {
        std::vector<int> leaving;
        for (const Member &m : dp_layout_.members)  // DP ranks, slots are replicas (groups.h)
            if (!pd.next.rank_of(m.unit, m.slot)) leaving.push_back(static_cast<int>(m.rank));
        auto *n = dynamic_cast<NcclCommunicator *>(nccl_.get());
        auto shrunk = n ? n->shrink(leaving, false) : Result<std::unique_ptr<Communicator>>(make_error("not NCCL"));
        if (!shrunk) return make_error("boundary: generation " + u(d.next.generation) + ": " + shrunk.error());
        prebuilt->value().nccl = std::move(shrunk).value();
    }
#endif
    if (auto st = adopt(d, *new_rank, std::move(prebuilt), nccl_grow); !st)
        return make_error("boundary: " + st.error());
    const std::string comm_ms = ms_since(t_adopt);
    const auto t_phase2 = Clock::now();
    const bool joiners = !d.rewind && !d.joining_units.empty();
    for (std::size_t i = 0; i < shards_.size(); ++i) {
        if (d.rewind)
            shards_[i].storage->assign(shard_range(shards_[i].length).size(), 0.0f);  // the checkpoint refills it
        else if (!joiners)
            *shards_[i].storage = std::move(held[i]);  // the survivors are the new world
    }
    if (ledger_) {
        // After a rewind the trainer restores the checkpoint's ledger; until then the old one
        // is resized where it can be so that GA is known.
        auto st = ledger_->resize(groups_.dp_size);
        if (!st && !d.rewind) return usage_error("boundary: " + st.error());
    }
    if (joiners) {
        if (auto st = hand_over(pd, held); !st) return make_error("boundary: " + st.error());
    }
    spare_.clear();  // unused ones (the change differed from the announced one)
    spare_next_.clear();
    report_ready();
    log_info("generation " + u(old_generation) + " -> " + u(generation_) + " at step " +
             u(step) + ": " + u(res.previous_world) + " -> " + u(world_) + " ranks (" +
             d.reason + (d.rewind ? ", rewind" : "") + "); this rank is now " + u(rank_) +
             "; took " + ms_since(t_decided) + " ms (" +
             (d.rewind ? "new communicator " + comm_ms + " ms)"
                       : "hand-off to survivors " + phase1_ms + " ms, then the new communicator " +
                             comm_ms + " ms, to joiners " + ms_since(t_phase2) + " ms)"));
    return finish(d.rewind ? Outcome::Rewind : Outcome::Reshaped);
}

Status Runtime::request_stop(const std::string &reason) {
    if (opts_.standalone) return usage_error("request_stop: a standalone rank has no job to stop");
    if (!client_) return usage_error("request_stop: not connected to the coordinator");
    if (fenced()) return fenced_error();
    Request r;
    r.op = Op::Stop;
    r.reason = reason;
    r.id = opts_.member_id;
    auto rep = client_->call(std::move(r), kStopRequestTimeoutMs);
    if (!rep) return Error{rep.error()};
    stop_requested_ = true;
    return Status::success();
}

Status Runtime::note_checkpoint(std::uint64_t step, const std::string &location) {
    if (opts_.standalone) return usage_error("note_checkpoint: a standalone rank has no coordinator");
    if (!client_) return usage_error("note_checkpoint: not connected to the coordinator");
    if (fenced()) return fenced_error();
    Request r;
    r.op = Op::Checkpoint;
    r.step = step;
    r.location = location;
    r.id = opts_.member_id;
    auto rep = client_->call(std::move(r), kStopRequestTimeoutMs);
    if (!rep) return Error{rep.error()};
    return Status::success();
}

}  // namespace omni::launcher
