// The manifest parsers (parse_manifest in ckpt_cpp.h, parse_shard_manifest in format.h): one
// pass over the text with nlohmann's SAX interface, straight into the structs, each object
// checked as it closes and the whole manifest once it ends.
//
// Not through nlohmann's document tree: building and freeing it was most of the time of
// opening a large checkpoint (measured on the 2-core dev VM: an index of 205k slices, 23 MB
// of JSON, took 0.6 s to parse that way against 0.14 s for nlohmann's tokenizer alone, and
// the tree is several times the text in memory), and ~0.1 ms of every shard manifest a
// commit reads from a file.
//
// What is accepted: an object with every key of the format, each value of its type and
// within its bound. Unknown keys are skipped with whatever they hold (room for additions
// that older readers may ignore); a known key given twice is an error. The first problem is
// reported with where it is, e.g. "manifest.tensors[3].sources[0]: 'offset': expected an
// array of 1..8 unsigned integers". A manifest of another format version is reported as such
// even when the rest of it does not parse as this version.
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <set>

#include "format.h"

namespace omni {
namespace ckpt {
namespace {

using json = nlohmann::json;

// The objects of the schema.
enum class Obj : std::uint8_t { manifest, shard, lr, ledger, rank_state, tensor, source };

// How a key's value is read.
enum class Val : std::uint8_t { u64, number, str, hex, object, array, shape };

// Where a key's value goes (with the object it is in: "rank" and "xxh3" are in two).
enum class Field : std::uint8_t {
    format_version, step, generation, world_size, unit_layout, writers, created_unix,
    lr_scheduler, ledger, rank_states, tensors, rank, attempt,
    kind, base_lr, warmup_steps, total_steps, last_step, epoch, seed,
    rng_bytes, consumed, xxh3, name, dtype, shape, sources, writer, file, dataset, offset, count,
    data_offset,
};

struct Key {
    const char *name;
    Field field;
    Val val;
    std::uint64_t max = 0;   // u64: largest value; str: longest; array: most entries
    Obj sub = Obj::manifest;   // object, array: what it (each entry) is
    bool optional = false;     // may be left out (keys added without a version increment)
};

constexpr std::uint64_t kAny = UINT64_MAX;
constexpr std::uint64_t kMaxTensors = std::uint64_t(1) << 24;

// Each object's keys, in the order in which a missing one is reported.
const Key kManifestKeys[] = {
    {"format_version", Field::format_version, Val::u64, UINT32_MAX},
    {"step", Field::step, Val::u64, kAny},
    {"generation", Field::generation, Val::u64, kAny},
    {"world_size", Field::world_size, Val::u64, kMaxWriters},
    {"unit_layout", Field::unit_layout, Val::str, 255},
    {"writers", Field::writers, Val::u64, kMaxWriters},
    {"created_unix", Field::created_unix, Val::u64, kAny},
    {"lr_scheduler", Field::lr_scheduler, Val::object, 0, Obj::lr},
    {"ledger", Field::ledger, Val::object, 0, Obj::ledger},
    {"rank_states", Field::rank_states, Val::array, kMaxWriters, Obj::rank_state},
    {"tensors", Field::tensors, Val::array, kMaxTensors, Obj::tensor},
};
const Key kShardKeys[] = {
    {"format_version", Field::format_version, Val::u64, UINT32_MAX},
    {"step", Field::step, Val::u64, kAny},
    {"rank", Field::rank, Val::u64, kMaxWriters - 1},
    {"attempt", Field::attempt, Val::str, 32},
    {"rank_states", Field::rank_states, Val::array, kMaxWriters, Obj::rank_state},
    {"tensors", Field::tensors, Val::array, kMaxTensors, Obj::tensor},
};
const Key kLrKeys[] = {
    {"kind", Field::kind, Val::str, 64},
    {"base_lr", Field::base_lr, Val::number},
    {"warmup_steps", Field::warmup_steps, Val::u64, kAny},
    {"total_steps", Field::total_steps, Val::u64, kAny},
    {"last_step", Field::last_step, Val::u64, kAny},
};
const Key kLedgerKeys[] = {
    {"epoch", Field::epoch, Val::u64, kAny},
    {"seed", Field::seed, Val::u64, kAny},
};
const Key kRankStateKeys[] = {
    {"rank", Field::rank, Val::u64, kMaxWriters - 1},
    {"rng_bytes", Field::rng_bytes, Val::u64, std::uint64_t(1) << 32},
    {"consumed", Field::consumed, Val::u64, std::uint64_t(1) << 40},
    {"xxh3", Field::xxh3, Val::hex},
};
const Key kTensorKeys[] = {
    {"name", Field::name, Val::str, kMaxNameLength},
    {"dtype", Field::dtype, Val::str, 8},
    {"shape", Field::shape, Val::shape},
    {"sources", Field::sources, Val::array, kMaxWriters, Obj::source},
};
const Key kSourceKeys[] = {
    {"writer", Field::writer, Val::u64, kMaxWriters - 1},
    {"file", Field::file, Val::str, 512},
    {"dataset", Field::dataset, Val::str, kMaxNameLength + 3},
    {"offset", Field::offset, Val::shape},
    {"count", Field::count, Val::shape},
    {"xxh3", Field::xxh3, Val::hex},
    // Readers before it skip it and read through HDF5, as readers after it do without it.
    {"data_offset", Field::data_offset, Val::u64, kMaxTensorBytes, Obj::manifest, true},
};

struct Schema {
    const Key *keys;
    std::size_t n;
};

template <std::size_t N>
constexpr Schema schema_of(const Key (&k)[N]) {
    return {k, N};
}

Schema schema(Obj o) {
    switch (o) {
    case Obj::manifest: return schema_of(kManifestKeys);
    case Obj::shard: return schema_of(kShardKeys);
    case Obj::lr: return schema_of(kLrKeys);
    case Obj::ledger: return schema_of(kLedgerKeys);
    case Obj::rank_state: return schema_of(kRankStateKeys);
    case Obj::tensor: return schema_of(kTensorKeys);
    case Obj::source: return schema_of(kSourceKeys);
    }
    return {nullptr, 0};
}

// One open object or array of the document.
struct Frame {
    enum Type : std::uint8_t { object, array, shape, skip } type;
    Obj obj;                   // object: which; array: of which
    int key = -1;              // object: the key whose value comes next; -1: unknown, skipped
    std::uint32_t seen = 0;    // object: bit i set once keys[i] has been given
    std::uint64_t count = 0;   // array, shape: entries so far; skip: depth
    std::uint64_t max = 0;     // array: most entries
    const char *name = "";     // array, shape: the key holding it
    Shape *target = nullptr;   // shape
};

// The value types nlohmann::json::sax_parse hands to a handler's events.
struct SaxTypes {
    using number_integer_t = json::number_integer_t;
    using number_unsigned_t = json::number_unsigned_t;
    using number_float_t = json::number_float_t;
    using string_t = json::string_t;
    using binary_t = json::binary_t;
};

// The events of nlohmann::json::sax_parse; every one returns false to stop at the first
// problem, which is kept in err_.
class Parser : public SaxTypes {
public:

    Parser(Obj root, const char *root_name, Manifest *m, ShardManifest *s)
        : root_(root), root_name_(root_name), m_(m), s_(s) {}

    const std::string &error() const { return err_; }
    bool done() const { return done_; }

    bool null() { return scalar(); }
    bool boolean(bool) { return scalar(); }
    bool number_integer(number_integer_t v) { return number(static_cast<double>(v), false, 0); }
    bool number_unsigned(number_unsigned_t v) { return number(static_cast<double>(v), true, v); }
    bool number_float(number_float_t v, const string_t &) { return number(v, false, 0); }
    bool binary(binary_t &) { return scalar(); }

    bool string(string_t &v) {
        if (skipping()) return true;
        const Key *k = pending();
        if (!k) return scalar();
        if (k->val == Val::hex) {
            std::uint64_t x = 0;
            if (v.size() > 16) return field_error("longer than 16 bytes");
            if (v.size() != 16) return field_error("expected 16 hex digits");
            for (char c : v) {
                int d;
                if (c >= '0' && c <= '9') d = c - '0';
                else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
                else return field_error("expected 16 lower-case hex digits");
                x = (x << 4) | static_cast<std::uint64_t>(d);
            }
            store_u64(x);
            return true;
        }
        if (k->val != Val::str) return field_error(expected(*k));
        if (v.size() > k->max) return field_error("longer than " + std::to_string(k->max) + " bytes");
        store_str(std::move(v));
        return true;
    }

    bool start_object(std::size_t) {
        if (skipping()) return ++top().count, true;
        if (stack_.empty()) return open_object(root_), true;
        Frame &f = top();
        if (f.type == Frame::array) return ++f.count <= f.max ? (open_object(f.obj), true) : too_many(f);
        if (f.type == Frame::shape) return shape_error();
        const Key *k = pending();
        if (f.key < 0) return open_skip();
        if (k->val != Val::object) return field_error(expected(*k));
        open_object(k->sub);
        return true;
    }

    bool key(string_t &name) {
        if (skipping()) return true;
        Frame &f = top();
        const Schema s = schema(f.obj);
        f.key = -1;
        for (std::size_t i = 0; i < s.n; ++i)
            if (name == s.keys[i].name) {
                if (f.seen & (1u << i)) return fail(where() + ": '" + name + "': given twice");
                f.seen |= 1u << i;
                f.key = static_cast<int>(i);
                break;
            }
        return true;
    }

    bool end_object() {
        if (skipping()) return close_skip();
        const Frame f = top();
        const Schema s = schema(f.obj);
        for (std::size_t i = 0; i < s.n; ++i)
            if (!(f.seen & (1u << i)) && !s.keys[i].optional) return fail(where() + ": missing key '" + s.keys[i].name + "'");
        if (!close_object(f.obj)) return false;
        stack_.pop_back();
        if (stack_.empty()) done_ = true;
        return true;
    }

    bool start_array(std::size_t) {
        if (skipping()) return ++top().count, true;
        if (stack_.empty()) return fail(std::string(root_name_) + ": expected a JSON object");
        Frame &f = top();
        if (f.type == Frame::array) return ++f.count <= f.max ? entry_error(f) : too_many(f);
        if (f.type == Frame::shape) return shape_error();
        if (f.key < 0) return open_skip();
        const Key &k = *pending();
        Frame a{};
        a.name = k.name;
        if (k.val == Val::shape) {
            a.type = Frame::shape;
            a.target = shape_target(k.field);
            a.target->clear();
        } else if (k.val == Val::array) {
            a.type = Frame::array;
            a.obj = k.sub;
            a.max = k.max;
        } else {
            return field_error(expected(k));
        }
        stack_.push_back(a);
        return true;
    }

    bool end_array() {
        if (skipping()) return close_skip();
        const Frame f = top();
        stack_.pop_back();
        if (f.type == Frame::shape && f.target->empty())   // reported from the shape's object
            return fail(where() + ": '" + f.name + "': " + shape_expected());
        return true;
    }

    bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception &) {
        if (err_.empty()) err_ = std::string(root_name_) + ": not valid JSON";
        return false;
    }

private:
    Frame &top() { return stack_.back(); }
    bool skipping() const { return !stack_.empty() && stack_.back().type == Frame::skip; }

    // The key of the current object whose value comes next; null where a value is not a
    // key's (the root, an array entry) or the key is unknown.
    const Key *pending() {
        if (stack_.empty() || top().type != Frame::object || top().key < 0) return nullptr;
        return &schema(top().obj).keys[top().key];
    }

    bool fail(std::string msg) {
        if (err_.empty()) err_ = std::move(msg);
        return false;
    }

    // "manifest.tensors[3].sources[0]": the object (or array entry) being read.
    std::string where() const {
        std::string w = root_name_;
        for (std::size_t i = 1; i < stack_.size(); ++i) {
            const Frame &f = stack_[i], &p = stack_[i - 1];
            if (f.type == Frame::object && p.type == Frame::object) w += std::string(".") + schema(p.obj).keys[p.key].name;
            else if (f.type == Frame::object) w += "[" + std::to_string(p.count - 1) + "]";
            else if (f.type == Frame::array) w += std::string(".") + f.name;
        }
        return w;
    }

    bool field_error(const std::string &msg) {
        const Key &k = schema(top().obj).keys[top().key];
        // An object's problems are reported from inside it, as "manifest.ledger: ...".
        if (k.val == Val::object) return fail(where() + "." + k.name + ": " + msg);
        return fail(where() + ": '" + k.name + "': " + msg);
    }

    static std::string shape_expected() {
        return "expected an array of 1.." + std::to_string(kMaxRank) + " unsigned integers";
    }

    static std::string expected(const Key &k) {
        switch (k.val) {
        case Val::u64: return "expected an unsigned integer";
        case Val::number: return "expected a number";
        case Val::str:
        case Val::hex: return "expected a string";
        case Val::object: return "expected a JSON object";
        case Val::array: return "expected an array";
        case Val::shape: return shape_expected();
        }
        return "unexpected value";
    }

    // A value that is no entry of a shape: named from the object that holds the shape.
    bool shape_error() {
        const Frame f = top();
        stack_.pop_back();
        return fail(where() + ": '" + f.name + "': expected unsigned integers");
    }

    // An array entry that is not an object (the entries of every array but a shape are).
    bool entry_error(const Frame &f) {
        return fail(where() + "[" + std::to_string(f.count - 1) + "]: expected a JSON object");
    }

    bool too_many(const Frame &f) {
        const Frame a = f;
        stack_.pop_back();
        return fail(where() + ": '" + a.name + "': more than " + std::to_string(a.max) + " entries");
    }

    // A value other than a number, a string or an object/array start: null, boolean, binary.
    bool scalar() {
        if (skipping()) return true;
        if (stack_.empty()) return fail(std::string(root_name_) + ": expected a JSON object");
        Frame &f = top();
        if (f.type == Frame::array) return ++f.count <= f.max ? entry_error(f) : too_many(f);
        if (f.type == Frame::shape) return shape_error();
        const Key *k = pending();
        if (!k) return true;   // the value of an unknown key
        return field_error(expected(*k));
    }

    // A number: `u` holds it when `is_unsigned`.
    bool number(double d, bool is_unsigned, std::uint64_t u) {
        if (skipping()) return true;
        if (stack_.empty()) return fail(std::string(root_name_) + ": expected a JSON object");
        Frame &f = top();
        if (f.type == Frame::array) return ++f.count <= f.max ? entry_error(f) : too_many(f);
        if (f.type == Frame::shape) {
            if (!is_unsigned) return shape_error();
            if (++f.count > kMaxRank) {
                const Frame s = f;
                stack_.pop_back();
                return fail(where() + ": '" + s.name + "': " + shape_expected());
            }
            f.target->push_back(u);
            return true;
        }
        const Key *k = pending();
        if (!k) return true;
        if (k->val == Val::number) {
            if (!std::isfinite(d)) return field_error("expected a finite number");
            store_number(d);
            return true;
        }
        if (k->val != Val::u64 || !is_unsigned) return field_error(expected(*k));
        if (u > k->max) return field_error("exceeds " + std::to_string(k->max));
        store_u64(u);
        return true;
    }

    void open_object(Obj o) {
        Frame f{};
        f.type = Frame::object;
        f.obj = o;
        stack_.push_back(f);
        switch (o) {
        case Obj::rank_state: rs_ = RankStateInfo(); break;
        case Obj::tensor:
            t_ = TensorInfo();
            dtype_.clear();
            break;
        case Obj::source: src_ = SourceRef(); break;
        default: break;
        }
    }

    bool open_skip() {
        Frame f{};
        f.type = Frame::skip;
        f.count = 1;
        stack_.push_back(f);
        return true;
    }

    bool close_skip() {
        if (--top().count == 0) stack_.pop_back();
        return true;
    }

    std::vector<TensorInfo> &tensors() { return m_ ? m_->tensors : s_->tensors; }
    std::vector<RankStateInfo> &rank_states() { return m_ ? m_->rank_states : s_->rank_states; }

    Shape *shape_target(Field f) {
        if (f == Field::shape) return &t_.shape;
        return f == Field::offset ? &src_.offset : &src_.count;
    }

    // Stores the value of the current key.
    void store_u64(std::uint64_t v) {
        const Frame &f = top();
        const bool shard = f.obj == Obj::shard;
        switch (schema(f.obj).keys[f.key].field) {
        case Field::format_version: (shard ? s_->format_version : m_->format_version) = static_cast<std::uint32_t>(v); break;
        case Field::step: (shard ? s_->step : m_->meta.step) = v; break;
        case Field::generation: m_->meta.generation = v; break;
        case Field::world_size: m_->meta.world_size = v; break;
        case Field::writers: m_->writers = static_cast<std::uint32_t>(v); break;
        case Field::created_unix: m_->created_unix = v; break;
        case Field::rank: (shard ? s_->rank : rs_.rank) = static_cast<std::uint32_t>(v); break;
        case Field::warmup_steps: m_->meta.lr.warmup_steps = v; break;
        case Field::total_steps: m_->meta.lr.total_steps = v; break;
        case Field::last_step: m_->meta.lr.last_step = v; break;
        case Field::epoch: m_->meta.ledger.epoch = v; break;
        case Field::seed: m_->meta.ledger.seed = v; break;
        case Field::rng_bytes: rs_.rng_bytes = v; break;
        case Field::consumed: rs_.consumed = v; break;
        case Field::xxh3: (f.obj == Obj::source ? src_.xxh3 : rs_.xxh3) = v; break;
        case Field::writer: src_.writer = static_cast<std::uint32_t>(v); break;
        case Field::data_offset: src_.data_offset = v; break;
        default: break;
        }
    }

    void store_str(std::string &&v) {
        switch (schema(top().obj).keys[top().key].field) {
        case Field::unit_layout: m_->meta.unit_layout = std::move(v); break;
        case Field::attempt: s_->attempt = std::move(v); break;
        case Field::kind: m_->meta.lr.kind = std::move(v); break;
        case Field::name: t_.name = std::move(v); break;
        case Field::dtype: dtype_ = std::move(v); break;
        case Field::file: src_.file = std::move(v); break;
        case Field::dataset: src_.dataset = std::move(v); break;
        default: break;
        }
    }

    void store_number(double d) { m_->meta.lr.base_lr = d; }   // the one number key

    // The checks of an object that has all its keys, then where it goes.
    bool close_object(Obj o) {
        switch (o) {
        case Obj::manifest: return finish_manifest();
        case Obj::shard: return finish_shard();
        case Obj::rank_state: rank_states().push_back(rs_); return true;
        case Obj::source: t_.sources.push_back(std::move(src_)); return true;
        case Obj::tensor: return finish_tensor();
        default: return true;
        }
    }

    // The places in messages are put together only for a message.
    bool finish_tensor() {
        if (auto st = check_tensor_name(t_.name); !st) return fail(where() + ": " + st.error());
        auto d = parse_dtype(dtype_);
        if (!d) return fail(where() + ": " + d.error());
        t_.dtype = d.value();
        if (auto st = check_shape(t_.shape, "'shape'"); !st) return fail(where() + ": " + st.error());
        const std::string dataset = slice_dataset_name(t_.name);
        for (std::size_t i = 0; i < t_.sources.size(); ++i) {
            const SourceRef &s = t_.sources[i];
            auto at = [&] { return where() + ".sources[" + std::to_string(i) + "]"; };
            if (auto st = check_file_ref(s.file); !st) return fail(at() + ": " + st.error());
            if (s.dataset != dataset)
                return fail(at() + ": 'dataset' is '" + s.dataset.substr(0, 300) + "'; expected '" + dataset + "'");
            if (auto st = check_slice(t_.shape, s.offset, s.count, ""); !st) return fail(at() + st.error());
        }
        if (!names_.insert(t_.name).second) return fail(where() + ": tensor " + t_.name + " appears twice");
        tensors().push_back(std::move(t_));
        return true;
    }

    bool unique_ranks() {
        std::set<std::uint32_t> seen;
        for (const auto &r : rank_states())
            if (!seen.insert(r.rank).second)
                return fail(std::string(root_name_) + ": rank state for rank " + std::to_string(r.rank) +
                            " appears twice");
        return true;
    }

    std::string tensor_at(std::size_t i) const {
        return std::string(root_name_) + ".tensors[" + std::to_string(i) + "]: ";
    }

    bool finish_manifest() {
        for (std::size_t i = 0; i < m_->tensors.size(); ++i) {
            const TensorInfo &t = m_->tensors[i];
            for (const auto &s : t.sources)
                if (s.writer >= m_->writers)
                    return fail(tensor_at(i) + "writer " + std::to_string(s.writer) + " >= writers " +
                                std::to_string(m_->writers));
            if (auto st = check_tiling(t); !st) return fail(tensor_at(i) + st.error());
        }
        return unique_ranks();
    }

    bool finish_shard() {
        for (std::size_t i = 0; i < s_->tensors.size(); ++i) {
            const TensorInfo &t = s_->tensors[i];
            if (t.sources.size() != 1) return fail(tensor_at(i) + "a shard holds exactly one slice per tensor");
            if (t.sources[0].writer != s_->rank) return fail(tensor_at(i) + "slice writer differs from the shard's rank");
        }
        if (auto st = check_attempt(s_->attempt); !st) return fail(std::string(root_name_) + ": " + st.error());
        return unique_ranks();
    }

    const Obj root_;
    const char *root_name_;
    Manifest *m_;
    ShardManifest *s_;
    std::vector<Frame> stack_;
    RankStateInfo rs_;
    TensorInfo t_;
    std::string dtype_;
    SourceRef src_;
    std::set<std::string> names_;
    std::string err_;
    bool done_ = false;
};

// The second look at a manifest that did not parse: whether it is JSON at all, and its
// top-level "format_version". A document that is not valid JSON is reported as that, and one
// of another format version as that, rather than as the first thing that did not fit.
class Outline : public SaxTypes {
public:
    std::optional<std::uint64_t> version;

    bool null() { return value(); }
    bool boolean(bool) { return value(); }
    bool number_integer(number_integer_t) { return value(); }
    bool number_unsigned(number_unsigned_t v) {
        if (depth_ == 1 && at_version_) version = v;
        return value();
    }
    bool number_float(number_float_t, const string_t &) { return value(); }
    bool string(string_t &) { return value(); }
    bool binary(binary_t &) { return value(); }
    bool start_object(std::size_t) { return at_version_ = false, ++depth_, true; }
    bool key(string_t &k) { return at_version_ = depth_ == 1 && k == "format_version", true; }
    bool end_object() { return --depth_, true; }
    bool start_array(std::size_t) { return at_version_ = false, ++depth_, true; }
    bool end_array() { return --depth_, true; }
    bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception &) { return false; }

private:
    bool value() { return at_version_ = false, true; }
    int depth_ = 0;
    bool at_version_ = false;
};

// Parses `text` as the root object `root`; returns "" or the first problem.
std::string parse(const std::string &text, Obj root, const char *root_name, Manifest *m, ShardManifest *s,
                  const std::string &version_error_tail) {
    if (text.size() > kMaxManifestBytes)
        return std::string(root_name) + ": larger than " + std::to_string(kMaxManifestBytes) + " bytes";
    Parser p(root, root_name, m, s);
    const bool ok = json::sax_parse(text, &p);
    const std::uint32_t version = m ? m->format_version : s->format_version;
    if (ok && p.done() && version == kFormatVersion) return {};
    if (ok && p.done())
        return std::string(root_name) + ": format version " + std::to_string(version) +
               " is not supported; " + version_error_tail;
    Outline o;
    if (!json::sax_parse(text, &o)) return std::string(root_name) + ": not valid JSON";
    if (o.version && *o.version <= UINT32_MAX && *o.version != kFormatVersion)
        return std::string(root_name) + ": format version " + std::to_string(*o.version) +
               " is not supported; " + version_error_tail;
    return p.error();
}

}  // namespace

Result<Manifest> parse_manifest(const std::string &text) {
    Manifest m;
    const std::string err = parse(text, Obj::manifest, "manifest", &m, nullptr,
                                  "this omni-ckpt reads version " + std::to_string(kFormatVersion));
    if (!err.empty()) return make_error(err);
    return m;
}

Result<ShardManifest> parse_shard_manifest(const std::string &text) {
    ShardManifest s;
    const std::string err = parse(text, Obj::shard, "shard manifest", nullptr, &s,
                                  "expected " + std::to_string(kFormatVersion));
    if (!err.empty()) return make_error(err);
    return s;
}

}  // namespace ckpt
}  // namespace omni
