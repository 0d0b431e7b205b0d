// The coordinator's wire format; see wire.h.
#include "coord/wire.h"

#include <algorithm>
#include <optional>
#include <set>
#include <type_traits>

#include <arpa/inet.h>

#include "common/parse.h"

namespace omni::launcher {
namespace {

using nlohmann::json;

struct OpSpec {
    Op op;
    const char *name;
    std::vector<const char *> fields;  // besides v, op, rid, secret; "?name": optional
};

const std::vector<OpSpec> &op_specs() {
    static const std::vector<OpSpec> specs = {
        {Op::Join, "join", {"id", "unit", "slot", "?node"}},
        {Op::Boundary, "boundary", {"id", "generation", "step", "global_batch", "micro_batch", "?mp"}},
        {Op::Lost, "lost", {"id"}},
        {Op::Ready, "ready", {"id", "generation"}},
        {Op::Reshape, "reshape", {"units", "?leave", "?via", "?cause"}},
        {Op::Stop, "stop", {"reason", "?id"}},
        {Op::Status, "status", {}},
        {Op::KvSet, "kv_set", {"generation", "key"}},
        {Op::KvGet, "kv_get", {"generation", "key", "timeout_ms"}},
        {Op::KvWait, "kv_wait", {"generation", "keys", "timeout_ms"}},
        {Op::KvAdd, "kv_add", {"generation", "key", "amount"}},
        {Op::Checkpoint, "checkpoint", {"step", "?location", "?id"}},
        {Op::Heartbeat, "heartbeat", {"id", "generation"}},
    };
    return specs;
}

// A request header as every client writes it (request_header: nlohmann's compact dump): one
// flat object of unsigned integers, plain printable strings and booleans, no whitespace.
// Read by a scan, not into nlohmann's DOM, whose map and allocations were two thirds of the
// coordinator's time a request (#46, "Scaling"). Anything else (whitespace, escapes, bytes
// outside printable ASCII, arrays, nested objects, signs, fractions, null, a repeated key,
// leading zeros, more than 19 digits) makes the scan give up, and the header goes to
// nlohmann's parser: either way the same checks run on the same fields (parse_fields), so
// a header is accepted or refused, with the same message, as before.
struct Flat {
    struct Value {
        enum Kind { Uint, String, Bool } kind = Uint;
        std::uint64_t u = 0;
        std::string_view s;
        bool b = false;
        bool is_number_unsigned() const { return kind == Uint; }
        bool is_number_integer() const { return kind == Uint; }
        bool is_string() const { return kind == String; }
        bool is_array() const { return false; }  // the scan gives up on arrays
    };
    std::pair<std::string_view, Value> items[24];
    std::size_t n = 0;
    const Value *find(std::string_view key) const {
        for (std::size_t i = 0; i < n; ++i)
            if (items[i].first == key) return &items[i].second;
        return nullptr;
    }
};

bool plain(char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }

bool scan_string(std::string_view h, std::size_t &i, std::string_view &out) {
    if (i >= h.size() || h[i] != '"') return false;
    const std::size_t b = ++i;
    while (i < h.size() && plain(h[i])) ++i;
    if (i >= h.size() || h[i] != '"') return false;
    out = h.substr(b, i - b);
    ++i;
    return true;
}

bool scan_flat(std::string_view h, Flat &f) {
    std::size_t i = 0;
    if (h.size() < 2 || h[i++] != '{') return false;
    if (h[i] == '}') return i + 1 == h.size();
    while (true) {
        if (f.n == std::size(f.items)) return false;
        auto &[key, v] = f.items[f.n];
        if (!scan_string(h, i, key) || i >= h.size() || h[i++] != ':' || i >= h.size()) return false;
        if (f.find(key)) return false;  // nlohmann keeps the last; leave that to it
        const char c = h[i];
        if (c == '"') {
            v.kind = Flat::Value::String;
            if (!scan_string(h, i, v.s)) return false;
        } else if (c >= '0' && c <= '9') {
            const std::size_t b = i;
            std::uint64_t u = 0;
            while (i < h.size() && h[i] >= '0' && h[i] <= '9') u = u * 10 + static_cast<std::uint64_t>(h[i++] - '0');
            if (i - b > 19 || (h[b] == '0' && i - b > 1)) return false;
            if (i < h.size() && (h[i] == '.' || h[i] == 'e' || h[i] == 'E')) return false;
            v.kind = Flat::Value::Uint;
            v.u = u;
        } else if (h.substr(i, 4) == "true" || h.substr(i, 5) == "false") {
            v.kind = Flat::Value::Bool;
            v.b = c == 't';
            i += v.b ? 4 : 5;
        } else {
            return false;
        }
        ++f.n;
        if (i >= h.size()) return false;
        if (h[i] == '}') return i + 1 == h.size();
        if (h[i++] != ',') return false;
    }
}

// The same questions to either form of a header.
const json *field(const json &j, const char *name) {
    auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
}
const Flat::Value *field(const Flat &f, const char *name) { return f.find(name); }
std::uint64_t as_uint(const json &v) { return v.get<std::uint64_t>(); }
std::uint64_t as_uint(const Flat::Value &v) { return v.u; }
std::string_view as_string(const json &v) { return v.get_ref<const std::string &>(); }
std::string_view as_string(const Flat::Value &v) { return v.s; }
template <class F>
void each_key(const json &j, F f) {
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!f(std::string_view(it.key()))) return;
}
template <class F>
void each_key(const Flat &j, F f) {
    for (std::size_t i = 0; i < j.n; ++i)
        if (!f(j.items[i].first)) return;
}

template <class Doc>
Result<std::uint64_t> get_uint(const Doc &j, const char *name, std::uint64_t max) {
    const auto *it = field(j, name);
    if (!it) return make_error(std::string("field '") + name + "' is missing");
    if (!it->is_number_unsigned())
        return make_error(std::string("field '") + name + "' must be an unsigned integer");
    auto v = as_uint(*it);
    if (v > max)
        return make_error(std::string("field '") + name + "' is " + std::to_string(v) +
                          ", above " + std::to_string(max));
    return v;
}

template <class Doc>
Result<std::string_view> get_string(const Doc &j, const char *name, std::size_t max_len) {
    const auto *it = field(j, name);
    if (!it) return make_error(std::string("field '") + name + "' is missing");
    if (!it->is_string()) return make_error(std::string("field '") + name + "' must be a string");
    const std::string_view s = as_string(*it);
    if (s.size() > max_len)
        return make_error(std::string("field '") + name + "' is longer than " +
                          std::to_string(max_len) + " bytes");
    return s;
}

bool printable(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

}  // namespace

const char *to_string(Op op) {
    for (const auto &s : op_specs())
        if (s.op == op) return s.name;
    return "?";
}

Status check_kv_key(std::string_view key) {
    if (key.empty() || key.size() > kMaxKeyLength)
        return make_error("key must be 1.." + std::to_string(kMaxKeyLength) + " characters");
    for (char c : key) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == ':' || c == '/' || c == '@' || c == '-';
        if (!ok) return make_error("key: only letters, digits and . _ : / @ - are allowed");
    }
    return Status::success();
}

Result<std::int64_t> parse_kv_integer(std::string_view value) {
    const bool neg = !value.empty() && value.front() == '-';
    std::string_view digits = neg ? value.substr(1) : value;
    if (digits.empty() || digits.size() > 19 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return make_error("holds a value that is not a decimal integer, so kv_add cannot add to it");
    std::uint64_t mag = 0;
    for (char c : digits) mag = mag * 10 + static_cast<std::uint64_t>(c - '0');
    if (mag > static_cast<std::uint64_t>(kMaxKvAdd))
        return make_error("holds an integer beyond +-" + std::to_string(kMaxKvAdd));
    return neg ? -static_cast<std::int64_t>(mag) : static_cast<std::int64_t>(mag);
}

namespace {

template <class Doc>
Result<Request> parse_fields(const Doc &j, const std::string_view *value) {
    Request r;
    auto ver = get_uint(j, "v", 1000);
    if (!ver) return Error{ver.error()};
    if (ver.value() != kWireVersion)
        return make_error("protocol version " + std::to_string(ver.value()) +
                          " is not supported (expected " + std::to_string(kWireVersion) + ")");
    auto rid = get_uint(j, "rid", UINT64_MAX);
    if (!rid) return Error{rid.error()};
    r.rid = rid.value();
    // A missing secret is not a parse error: the service refuses it (and logs it) like a
    // wrong one.
    if (field(j, "secret")) {
        auto secret = get_string(j, "secret", kSecretHexLength);
        if (!secret) return Error{secret.error()};
        r.secret = secret.value();
    }
    auto opname = get_string(j, "op", 32);
    if (!opname) return Error{opname.error()};
    const OpSpec *spec = nullptr;
    for (const auto &s : op_specs())
        if (opname.value() == s.name) spec = &s;
    if (!spec) {
        std::string shown(opname.value());
        if (!printable(shown)) shown = "(unprintable)";
        return make_error("unknown op '" + shown + "'");
    }
    r.op = spec->op;

    // The first unknown key in sorted order is named (nlohmann's object is sorted; the scan
    // keeps the text's order).
    std::optional<std::string_view> strange;
    each_key(j, [&](std::string_view key) {
        bool known = key == "v" || key == "op" || key == "rid" || key == "secret";
        for (const char *f : spec->fields) known = known || key == (f[0] == '?' ? f + 1 : f);
        if (!known && (!strange || key < *strange)) strange = key;
        return true;
    });
    if (strange) {
        std::string stranger(strange->substr(0, 64));
        if (!printable(stranger)) stranger = "(unprintable)";
        return make_error(std::string("op ") + spec->name + ": unexpected field '" + stranger + "'");
    }
    auto fail = [&](const std::string &msg) {
        return make_error(std::string("op ") + spec->name + ": " + msg);
    };
    for (const char *f : spec->fields) {
        if (f[0] == '?') {
            if (!field(j, f + 1)) continue;  // an optional field that is absent
            ++f;
        }
        std::string_view name(f);
        if (name == "id") {
            auto v = get_string(j, f, kMaxMemberIdLength);
            if (!v) return fail(v.error());
            if (auto st = check_member_id(v.value()); !st) return fail(st.error());
            r.id = v.value();
        } else if (name == "unit" || name == "slot" || name == "units") {
            auto v = get_uint(j, f, UINT32_MAX);
            if (!v) return fail(v.error());
            (name == "unit" ? r.unit : name == "slot" ? r.slot : r.units) =
                static_cast<std::uint32_t>(v.value());
        } else if (name == "generation" || name == "step") {
            auto v = get_uint(j, f, std::uint64_t(1) << 62);
            if (!v) return fail(v.error());
            (name == "generation" ? r.generation : r.step) = v.value();
        } else if (name == "global_batch" || name == "micro_batch") {
            auto v = get_uint(j, f, std::uint64_t(1) << 62);
            if (!v) return fail(v.error());
            (name == "global_batch" ? r.batch.global_batch : r.batch.micro_batch) = v.value();
        } else if (name == "mp") {
            auto v = get_uint(j, f, kMaxUnitSizeRanks);
            if (!v) return fail(v.error());
            if (v.value() == 0) return fail("mp must be 1.." + std::to_string(kMaxUnitSizeRanks));
            r.batch.mp = static_cast<std::uint32_t>(v.value());
        } else if (name == "amount") {
            const auto *it = field(j, f);
            if (!it) return fail("field 'amount' is missing");
            if (!it->is_number_integer()) return fail("field 'amount' must be an integer");
            bool neg = false;
            std::uint64_t mag = 0;
            if constexpr (std::is_same_v<Doc, json>) {
                neg = it->is_number_unsigned() ? false : it->template get<std::int64_t>() < 0;
                mag = it->is_number_unsigned() ? it->template get<std::uint64_t>()
                      : neg ? 0 - static_cast<std::uint64_t>(it->template get<std::int64_t>())
                            : static_cast<std::uint64_t>(it->template get<std::int64_t>());
            } else {
                mag = as_uint(*it);  // the scan reads unsigned integers only
            }
            if (mag > static_cast<std::uint64_t>(kMaxKvAdd))
                return fail("field 'amount' is beyond +-" + std::to_string(kMaxKvAdd));
            r.amount = neg ? -static_cast<std::int64_t>(mag) : static_cast<std::int64_t>(mag);
        } else if (name == "timeout_ms") {
            auto v = get_uint(j, f, kMaxWaitMs);
            if (!v) return fail(v.error());
            r.timeout_ms = static_cast<std::int64_t>(v.value());
        } else if (name == "reason") {
            auto v = get_string(j, f, 64);
            if (!v) return fail(v.error());
            if (v.value().empty() || !printable(v.value()))
                return fail("field 'reason' must be 1..64 printable characters");
            r.reason = v.value();
        } else if (name == "node") {
            auto v = get_string(j, f, kMaxNodeNameLength);
            if (!v) return fail(v.error());
            if (auto st = check_node_name(v.value()); !st) return fail(st.error());
            r.node = v.value();
        } else if (name == "leave") {
            const auto &k = *field(j, "leave");
            const std::string bad = "field 'leave' must be an array of 1.." + std::to_string(kMaxUnits) + " unit ids";
            if constexpr (std::is_same_v<Doc, json>) {
                if (!k.is_array() || k.empty() || k.size() > kMaxUnits) return fail(bad);
                for (const auto &e : k) {
                    if (!e.is_number_unsigned() || e.template get<std::uint64_t>() >= kMaxUnits)
                        return fail("field 'leave' must hold unit ids below " + std::to_string(kMaxUnits));
                    r.leave.push_back(e.template get<std::uint32_t>());
                }
            } else {
                (void)k;
                return fail(bad);  // the scan gives up on arrays: never an array here
            }
        } else if (name == "via") {
            auto v = get_string(j, f, 16);
            if (!v) return fail(v.error());
            if (auto st = check_grow_via(v.value()); !st) return fail(st.error());
            r.via = v.value();
        } else if (name == "cause") {
            auto v = get_string(j, f, 16);
            if (!v) return fail(v.error());
            if (auto st = check_resize_cause(v.value()); !st) return fail(st.error());
            r.cause = v.value();
        } else if (name == "location") {
            auto v = get_string(j, f, kMaxLocationLength);
            if (!v) return fail(v.error());
            if (v.value().empty() || !printable(v.value()))
                return fail("field 'location' must be 1.." + std::to_string(kMaxLocationLength) +
                            " printable characters");
            r.location = v.value();
        } else if (name == "key") {
            auto v = get_string(j, f, kMaxKeyLength);
            if (!v) return fail(v.error());
            if (auto st = check_kv_key(v.value()); !st) return fail(st.error());
            r.keys.emplace_back(v.value());
        } else if (name == "keys") {
            const auto *kit = field(j, "keys");
            if (!kit) return fail("field 'keys' is missing");
            const std::string bad = "field 'keys' must be an array of 1.." + std::to_string(kMaxWaitKeys) + " keys";
            if constexpr (std::is_same_v<Doc, json>) {
                const auto &k = *kit;
                if (!k.is_array() || k.empty() || k.size() > kMaxWaitKeys) return fail(bad);
                for (const auto &e : k) {
                    if (!e.is_string()) return fail("field 'keys' must hold strings");
                    const auto &s = e.template get_ref<const std::string &>();
                    if (auto st = check_kv_key(s); !st) return fail(st.error());
                    r.keys.push_back(s);
                }
            } else {
                return fail(bad);  // the scan gives up on arrays: never an array here
            }
        }
    }
    if (r.op == Op::KvSet) {
        if (!value) return fail("the value frame is missing");
        if (value->size() > kMaxValueBytes)
            return fail("the value is longer than " + std::to_string(kMaxValueBytes) + " bytes");
        r.value = std::string(*value);
    } else if (value) {
        return fail("unexpected second frame");
    }
    return r;
}

}  // namespace

Result<Request> parse_request(std::string_view header, const std::string_view *value) {
    if (header.size() > kMaxHeaderBytes)
        return make_error("request header is longer than " + std::to_string(kMaxHeaderBytes) +
                          " bytes");
    Flat flat;
    if (scan_flat(header, flat)) return parse_fields(flat, value);
    // Depth is bounded by the size limit; nlohmann's recursive parser copes with 256 KiB of
    // nesting brackets, which the fuzzer exercises.
    json j = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return make_error("request header is not a JSON object");
    return parse_fields(j, value);
}

std::string request_header(const Request &r) {
    json j = {{"v", kWireVersion}, {"op", to_string(r.op)}, {"rid", r.rid}, {"secret", r.secret}};
    switch (r.op) {
    case Op::Join:
        j["id"] = r.id;
        j["unit"] = r.unit;
        j["slot"] = r.slot;
        if (!r.node.empty()) j["node"] = r.node;
        break;
    case Op::Boundary:
        j["id"] = r.id;
        j["generation"] = r.generation;
        j["step"] = r.step;
        j["global_batch"] = r.batch.global_batch;
        j["micro_batch"] = r.batch.micro_batch;
        if (r.batch.mp != 1) j["mp"] = r.batch.mp;
        break;
    case Op::Lost: j["id"] = r.id; break;
    case Op::Ready:
    case Op::Heartbeat: j["id"] = r.id; j["generation"] = r.generation; break;
    case Op::Reshape:
        j["units"] = r.units;
        if (!r.leave.empty()) j["leave"] = r.leave;
        if (!r.via.empty()) j["via"] = r.via;
        if (!r.cause.empty()) j["cause"] = r.cause;
        break;
    case Op::Checkpoint:
        j["step"] = r.step;
        if (!r.location.empty()) j["location"] = r.location;
        if (!r.id.empty()) j["id"] = r.id;
        break;
    case Op::Stop:
        j["reason"] = r.reason;
        if (!r.id.empty()) j["id"] = r.id;
        break;
    case Op::Status: break;
    case Op::KvSet:
        j["generation"] = r.generation;
        j["key"] = r.keys.empty() ? std::string() : r.keys.front();
        break;
    case Op::KvGet:
        j["generation"] = r.generation;
        j["key"] = r.keys.empty() ? std::string() : r.keys.front();
        j["timeout_ms"] = r.timeout_ms;
        break;
    case Op::KvWait:
        j["generation"] = r.generation;
        j["keys"] = r.keys;
        j["timeout_ms"] = r.timeout_ms;
        break;
    case Op::KvAdd:
        j["generation"] = r.generation;
        j["key"] = r.keys.empty() ? std::string() : r.keys.front();
        j["amount"] = r.amount;
        break;
    }
    return j.dump();
}

json decision_to_json(const Decision &d) {
    // Compact on purpose: the same decision goes to every rank, so its size is paid world
    // times. Units, not members: a rank finds its new rank from (unit, slot) with
    // Layout::rank_of, so no list of every rank's id travels (at 4096 ranks that list would
    // be ~128 KiB per reply, 512 MiB per reshape).
    json j = {{"kind", to_string(d.kind)},       {"generation", d.generation},
              {"step", d.step},                  {"reason", d.reason},
              {"rewind", d.rewind},              {"lost", d.lost},
              {"leaving_units", d.leaving_units}, {"joining_units", d.joining_units}};
    // RESHAPED: the new generation; CONTINUE with a next: the one announced for the next
    // boundary (ranks prepare for it).
    if (d.kind == DecisionKind::Reshaped || (d.kind == DecisionKind::Continue && d.next.world > 0))
        j["next"] = {{"generation", d.next.generation}, {"world", d.next.world},
                     {"units", d.next.units}};
    return j;
}

namespace {

Result<std::vector<std::uint32_t>> unit_list(const json &j, const char *name) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_array() || it->size() > kMaxUnits)
        return make_error(std::string("decision: '") + name + "' missing or too long");
    std::vector<std::uint32_t> out;
    for (const auto &e : *it) {
        if (!e.is_number_unsigned() || e.get<std::uint64_t>() > UINT32_MAX)
            return make_error(std::string("decision: '") + name + "' holds a bad unit id");
        out.push_back(e.get<std::uint32_t>());
    }
    return out;
}

}  // namespace

Result<Decision> decision_from_json(const json &j) {
    // Replies come from the coordinator that holds the secret; still, a rank must not crash
    // on a malformed reply, so every access is checked (json::value/at would throw).
    if (!j.is_object()) return make_error("decision: not an object");
    Decision d;
    auto kind = j.find("kind");
    if (kind == j.end() || !kind->is_string()) return make_error("decision: 'kind' missing");
    if (*kind == "continue") d.kind = DecisionKind::Continue;
    else if (*kind == "reshaped") d.kind = DecisionKind::Reshaped;
    else if (*kind == "stop") d.kind = DecisionKind::Stop;
    else return make_error("decision: unknown kind");
    auto g = get_uint(j, "generation", UINT64_MAX), s = get_uint(j, "step", UINT64_MAX);
    if (!g || !s) return make_error("decision: bad generation or step");
    d.generation = g.value();
    d.step = s.value();
    auto reason = get_string(j, "reason", 64);
    if (!reason) return make_error("decision: " + reason.error());
    d.reason = reason.value();
    auto rw = j.find("rewind");
    if (rw == j.end() || !rw->is_boolean()) return make_error("decision: 'rewind' missing");
    d.rewind = rw->get<bool>();
    auto lost = j.find("lost");
    if (lost == j.end() || !lost->is_array()) return make_error("decision: 'lost' missing");
    for (const auto &e : *lost) {
        if (!e.is_string()) return make_error("decision: 'lost' holds a non-string");
        d.lost.push_back(e.get<std::string>());
    }
    auto leaving = unit_list(j, "leaving_units"), joining = unit_list(j, "joining_units");
    if (!leaving) return Error{leaving.error()};
    if (!joining) return Error{joining.error()};
    d.leaving_units = std::move(leaving).value();
    d.joining_units = std::move(joining).value();
    auto n = j.find("next");
    if (d.kind == DecisionKind::Reshaped || (d.kind == DecisionKind::Continue && n != j.end())) {
        if (n == j.end() || !n->is_object()) return make_error("decision: 'next' missing");
        auto ng = get_uint(*n, "generation", UINT64_MAX), w = get_uint(*n, "world", kMaxWorld);
        if (!ng || !w) return make_error("decision: bad next generation or world");
        auto units = unit_list(*n, "units");
        if (!units) return Error{units.error()};
        d.next.generation = ng.value();
        d.next.world = static_cast<std::uint32_t>(w.value());
        d.next.units = std::move(units).value();
        if (d.next.units.empty() || d.next.world % d.next.units.size() != 0 ||
            d.next.world / d.next.units.size() > kMaxUnitSizeRanks)
            return make_error("decision: world is not a multiple of the unit count");
        // The members, ids aside, follow from the units (protocol.h: rank = position *
        // unit_size + slot).
        const std::uint32_t unit_size = d.next.world / static_cast<std::uint32_t>(d.next.units.size());
        d.next.members.reserve(d.next.world);
        for (std::uint32_t r = 0; r < d.next.world; ++r)
            d.next.members.push_back({std::string(), d.next.units[r / unit_size], r % unit_size, r});
    }
    return d;
}

json heartbeat_to_json(const HeartbeatAck &a) {
    return {{"fenced", a.fenced},
            {"fenced_generation", a.fenced_generation},
            {"abandon_generation", a.abandon_generation},
            {"unit_lost", a.unit_lost},
            {"timeout_ms", static_cast<std::uint64_t>(std::max<std::int64_t>(a.timeout_ms, 0))},
            {"interval_ms", static_cast<std::uint64_t>(std::max<std::int64_t>(a.interval_ms, 0))}};
}

Result<HeartbeatAck> heartbeat_from_json(const json &j) {
    // Checked as a decision is: a rank must not crash on a malformed reply.
    if (!j.is_object()) return make_error("heartbeat reply: not an object");
    HeartbeatAck a;
    for (const char *f : {"fenced", "unit_lost"}) {
        auto it = j.find(f);
        if (it == j.end() || !it->is_boolean()) return make_error(std::string("heartbeat reply: '") + f + "' missing");
        (std::string_view(f) == "fenced" ? a.fenced : a.unit_lost) = it->get<bool>();
    }
    auto fg = get_uint(j, "fenced_generation", UINT64_MAX), ag = get_uint(j, "abandon_generation", UINT64_MAX);
    auto t = get_uint(j, "timeout_ms", kMaxWaitMs), i = get_uint(j, "interval_ms", kMaxWaitMs);
    if (!fg || !ag || !t || !i) return make_error("heartbeat reply: bad generation or times");
    a.fenced_generation = fg.value();
    a.abandon_generation = ag.value();
    a.timeout_ms = static_cast<std::int64_t>(t.value());
    a.interval_ms = static_cast<std::int64_t>(i.value());
    return a;
}

json status_to_json(const ProtocolStatus &s) {
    json j = {{"phase", to_string(s.phase)},
              {"generation", s.generation},
              {"units", s.units},
              {"world", s.world},
              {"unit_size", s.unit_size},
              {"min_units", s.min_units},
              {"max_units", s.max_units},
              {"target_units", s.target_units ? json(*s.target_units) : json(nullptr)},
              {"boundary_step", s.boundary_step ? json(*s.boundary_step) : json(nullptr)},
              {"arrived", s.arrived},
              {"last_step", s.last_step},
              {"pending_joiners", s.pending_joiners},
              {"lost", s.lost},
              {"unit_ids", s.layout.units}};
    json members = json::array();  // status goes to one client: here ids are worth it
    for (const auto &m : s.layout.members) {
        json e = {{"id", m.id}, {"unit", m.unit}, {"slot", m.slot}, {"rank", m.rank}};
        auto it = s.nodes.find(m.id);
        e["node"] = it != s.nodes.end() ? json(it->second) : json(nullptr);
        members.push_back(std::move(e));
    }
    j["members"] = std::move(members);
    j["target_leave"] = s.target_leave;
    j["target_via"] = s.target_units ? json(s.target_via) : json(nullptr);
    j["global_batch"] = s.global_batch ? json(*s.global_batch) : json(nullptr);
    j["micro_batch"] = s.micro_batch ? json(*s.micro_batch) : json(nullptr);
    j["mp"] = s.mp;
    // GA = B / (b x DP), DP = world / M, whole in every world the coordinator admits.
    json ga = nullptr;
    const std::uint64_t dp = s.mp ? s.world / s.mp : 0;
    if (s.global_batch && s.micro_batch && *s.micro_batch > 0 && dp > 0 &&
        *s.global_batch % (*s.micro_batch * dp) == 0)
        ga = *s.global_batch / (*s.micro_batch * dp);
    j["grad_accum"] = ga;
    j["samples_per_s"] = s.samples_per_s ? json(*s.samples_per_s) : json(nullptr);
    j["changes"] = s.changes;
    auto summary = [](const std::optional<Decision> &d) -> json {
        if (!d) return nullptr;
        json out = {{"kind", to_string(d->kind)}, {"generation", d->generation},
                    {"step", d->step}, {"reason", d->reason}};
        if (d->kind == DecisionKind::Reshaped) {
            out["next_generation"] = d->next.generation;
            out["next_world"] = d->next.world;
        }
        return out;
    };
    j["last_decision"] = summary(s.last_decision);
    j["last_change"] = summary(s.last_change);
    j["change_pause_ms"] = s.change_pause_ms ? json(*s.change_pause_ms) : json(nullptr);
    json resize = nullptr;
    if (const auto &r = s.last_resize) {
        resize = {{"kind", r->kind},          {"generation", r->generation}, {"step", r->step},
                  {"old_units", r->old_units}, {"new_units", r->new_units},   {"old_world", r->old_world},
                  {"new_world", r->new_world}};
        // Its pause is known once every rank of the generation it made was ready.
        resize["pause_ms"] = r->generation == s.generation && s.change_pause_ms ? json(*s.change_pause_ms)
                                                                                : json(nullptr);
    }
    j["last_resize"] = std::move(resize);
    // The nodes each unit's ranks said they run on: {"0": ["n1"], "1": ["n2", "n3"]}.
    json unit_nodes = json::object();
    for (const auto &m : s.layout.members)
        if (auto it = s.nodes.find(m.id); it != s.nodes.end()) {
            json &list = unit_nodes[std::to_string(m.unit)];
            if (std::find(list.begin(), list.end(), it->second) == list.end()) list.push_back(it->second);
        }
    j["unit_nodes"] = std::move(unit_nodes);
    return j;
}

std::string Endpoint::zmq() const {
    return "tcp://" + ip + ":" + (port ? std::to_string(port) : std::string("*"));
}

Result<Endpoint> parse_endpoint(std::string_view text, bool for_bind) {
    auto bad = [&](const std::string &why) {
        std::string shown(text.substr(0, 80));
        if (!printable(shown)) shown = "(unprintable)";
        return make_error("coordinator endpoint '" + shown + "': " + why);
    };
    constexpr std::string_view scheme = "tcp://";
    if (text.size() > 64 || text.substr(0, scheme.size()) != scheme)
        return bad("expected tcp://IPV4:PORT");
    std::string_view rest = text.substr(scheme.size());
    auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad("expected tcp://IPV4:PORT");
    Endpoint e;
    e.ip = std::string(rest.substr(0, colon));
    struct in_addr addr;
    if (::inet_pton(AF_INET, e.ip.c_str(), &addr) != 1)
        return bad("'" + e.ip + "' is not an IPv4 address");
    if (addr.s_addr == INADDR_ANY) return bad("the wildcard address is not allowed");
    auto port = parse_uint(rest.substr(colon + 1), for_bind ? 0 : 1, 65535, "port");
    if (!port) return bad(port.error());
    e.port = static_cast<std::uint16_t>(port.value());
    return e;
}

std::string ok_reply(std::uint64_t rid, json body) {
    // Most replies have no body: the same bytes as the dump below, without building it.
    if (body.is_object() && body.empty())
        return "{\"ok\":true,\"rid\":" + std::to_string(rid) + ",\"v\":" + std::to_string(kWireVersion) + "}";
    body["v"] = kWireVersion;
    body["rid"] = rid;
    body["ok"] = true;
    return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string heartbeat_reply(std::uint64_t rid, const HeartbeatAck &a) {
    // nlohmann's object is sorted by key; ok_reply adds ok, rid and v.
    auto ms = [](std::int64_t t) { return std::to_string(static_cast<std::uint64_t>(std::max<std::int64_t>(t, 0))); };
    return std::string("{\"abandon_generation\":") + std::to_string(a.abandon_generation) +
           ",\"fenced\":" + (a.fenced ? "true" : "false") +
           ",\"fenced_generation\":" + std::to_string(a.fenced_generation) + ",\"interval_ms\":" + ms(a.interval_ms) +
           ",\"ok\":true,\"rid\":" + std::to_string(rid) + ",\"timeout_ms\":" + ms(a.timeout_ms) +
           ",\"unit_lost\":" + (a.unit_lost ? "true" : "false") + ",\"v\":" + std::to_string(kWireVersion) + "}";
}

std::string error_reply(std::uint64_t rid, std::string_view message) {
    // dump() with a replacement handler: error messages may quote bytes that are not UTF-8.
    json j = {{"v", kWireVersion}, {"rid", rid}, {"ok", false}, {"error", std::string(message)}};
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace omni::launcher
