// Names and manifests of the checkpoint format, and the manifests written as JSON; see format.h
// and omni-ckpt(5). The parsers are in manifest_parse.cc.
#include "format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>

#include "common/parse.h"

namespace omni {
namespace ckpt {

using nlohmann::json;

namespace {

bool is_digits(const std::string &s, std::size_t from, std::size_t to) {
    if (from >= to) return false;
    for (std::size_t i = from; i < to; ++i)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

std::optional<std::uint64_t> parse_step_digits(const std::string &digits) {
    // At least the 10 digits we write, so "step-1" (a user's directory) is not taken for ours.
    if (digits.size() < 10 || !is_digits(digits, 0, digits.size())) return std::nullopt;
    auto v = parse_uint(digits, 0, UINT64_MAX, "");
    if (!v) return std::nullopt;
    return v.value();
}

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-' || c == ':' || c == '+';
}

// "shard-<5..7 digits><ext>": an HDF5 shard (".h5") or a reference shard (".ref").
bool is_shard_name(const std::string &s, const std::string &ext) {
    const std::size_t e = ext.size();
    if (s.size() < 11 + e || s.compare(0, 6, "shard-") != 0 || s.compare(s.size() - e, e, ext) != 0)
        return false;
    const std::size_t digits = s.size() - 6 - e;
    return digits >= 5 && digits <= 7 && is_digits(s, 6, s.size() - e);
}

bool is_shard_file_name(const std::string &s) { return is_shard_name(s, ".h5"); }

std::string shard_name(std::uint32_t rank, const char *ext) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "shard-%05u%s", rank, ext);
    return buf;
}

bool is_sibling_name(const std::string &s) {
    if (s.empty() || s.size() > 255 || s[0] == '.') return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '.' || c == '-';
    });
}

}  // namespace

const char *dtype_name(DType t) {
    switch (t) {
    case DType::fp32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::int64: return "int64";
    case DType::uint8: return "uint8";
    }
    return "?";
}

std::size_t dtype_size(DType t) {
    switch (t) {
    case DType::fp32: return 4;
    case DType::bf16:
    case DType::fp16: return 2;
    case DType::int64: return 8;
    case DType::uint8: return 1;
    }
    return 0;
}

Result<DType> parse_dtype(const std::string &text) {
    for (DType t : {DType::fp32, DType::bf16, DType::fp16, DType::int64, DType::uint8})
        if (text == dtype_name(t)) return t;
    auto c = parse_choice(text, {"fp32", "bf16", "fp16", "int64", "uint8"}, "dtype");
    return make_error(c.error());
}

std::string step_dir_name(std::uint64_t step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "step-%010" PRIu64, step);
    return buf;
}

std::string partial_dir_name(std::uint64_t step, const std::string &attempt) {
    return "." + step_dir_name(step) + ".partial-" + attempt;
}

std::optional<std::uint64_t> parse_step_dir_name(const std::string &name) {
    if (name.compare(0, 5, "step-") != 0) return std::nullopt;
    return parse_step_digits(name.substr(5));
}

std::optional<std::uint64_t> parse_partial_dir_name(const std::string &name) {
    if (name.compare(0, 6, ".step-") != 0) return std::nullopt;
    const auto dot = name.find(".partial-", 6);
    if (dot == std::string::npos) return std::nullopt;
    if (!check_attempt(name.substr(dot + 9))) return std::nullopt;
    return parse_step_digits(name.substr(6, dot - 6));
}

std::string shard_file_name(std::uint32_t rank) { return shard_name(rank, ".h5"); }
std::string ref_shard_file_name(std::uint32_t rank) { return shard_name(rank, ".ref"); }
bool is_ref_shard_file_name(const std::string &name) { return is_shard_name(name, ".ref"); }

std::string slice_dataset_name(const std::string &tensor) { return "/t/" + tensor; }
std::string virtual_dataset_name(const std::string &tensor) { return "/tensors/" + tensor; }

std::string rank_state_group(std::uint32_t rank) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "/state/rank-%05u", rank);
    return buf;
}

Status check_tensor_name(const std::string &name) {
    const std::string form =
        "expected '/'-separated components of [A-Za-z0-9_.:+-], at most " +
        std::to_string(kMaxNameLength) + " bytes";
    if (name.empty() || name.size() > kMaxNameLength)
        return make_error("tensor name '" + name.substr(0, 64) + "': " + form);
    std::size_t start = 0;
    while (start <= name.size()) {
        std::size_t end = name.find('/', start);
        if (end == std::string::npos) end = name.size();
        const std::string comp = name.substr(start, end - start);
        if (comp.empty() || comp == "." || comp == ".." ||
            !std::all_of(comp.begin(), comp.end(), name_char))
            return make_error("tensor name '" + name.substr(0, 64) + "': " + form);
        start = end + 1;
    }
    return Status::success();
}

Status check_attempt(const std::string &attempt) {
    const bool ok = !attempt.empty() && attempt.size() <= 32 &&
                    std::all_of(attempt.begin(), attempt.end(), [](char c) {
                        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                               (c >= '0' && c <= '9') || c == '_' || c == '-';
                    });
    if (!ok)
        return make_error("attempt '" + attempt.substr(0, 40) +
                          "': expected 1..32 characters of [A-Za-z0-9_-]");
    return Status::success();
}

Status check_file_ref(const std::string &file) {
    if (is_shard_file_name(file)) return Status::success();
    if (file.compare(0, 3, "../") == 0) {
        const auto slash = file.find('/', 3);
        if (slash != std::string::npos && is_sibling_name(file.substr(3, slash - 3)) &&
            is_shard_file_name(file.substr(slash + 1)))
            return Status::success();
    }
    return make_error("file reference '" + file.substr(0, 64) +
                      "': expected shard-NNNNN.h5 or ../CHECKPOINT/shard-NNNNN.h5");
}

std::uint64_t element_count(const Shape &s) {
    std::uint64_t n = 1;
    for (auto d : s) n *= d;
    return n;
}

Status check_shape(const Shape &shape, const std::string &what) {
    if (shape.empty() || shape.size() > kMaxRank)
        return make_error(what + ": " + std::to_string(shape.size()) + " dimensions; expected 1.." +
                          std::to_string(kMaxRank));
    std::uint64_t n = 1;
    for (auto d : shape) {
        if (d == 0) return make_error(what + ": " + shape_string(shape) + " has a zero dimension");
        if (n > (std::uint64_t(1) << 62) / d)
            return make_error(what + ": " + shape_string(shape) + " has more than 2^62 elements");
        n *= d;
    }
    return Status::success();
}

Status check_slice(const Shape &shape, const Shape &offset, const Shape &count,
                   const std::string &what) {
    if (offset.size() != shape.size() || count.size() != shape.size())
        return make_error(what + ": slice offset " + shape_string(offset) + " count " +
                          shape_string(count) + " does not match the " +
                          std::to_string(shape.size()) + "-d shape " + shape_string(shape));
    for (std::size_t d = 0; d < shape.size(); ++d)
        if (count[d] == 0 || offset[d] >= shape[d] || count[d] > shape[d] - offset[d])
            return make_error(what + ": slice offset " + shape_string(offset) + " count " +
                              shape_string(count) + " is empty or outside the shape " +
                              shape_string(shape));
    return Status::success();
}

Status check_slice_bytes(DType dtype, const Shape &shape, const Shape &count,
                         const std::string &what) {
    const std::size_t elem = dtype_size(dtype);
    if (elem == 0)
        return make_error(what + ": dtype " + std::to_string(int(dtype)) +
                          " is not one of fp32, bf16, fp16, int64, uint8");
    const std::uint64_t limit = kMaxTensorBytes / elem;
    if (element_count(shape) > limit)
        return make_error(what + ": shape " + shape_string(shape) + " of " + dtype_name(dtype) +
                          " is more than 2^62 bytes");
    if (element_count(count) > limit)
        return make_error(what + ": slice count " + shape_string(count) + " of " +
                          dtype_name(dtype) + " is more than 2^62 bytes");
    return Status::success();
}

std::string name_path_conflict(const std::set<std::string> &names, const std::string &name) {
    for (auto slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1))
        if (names.count(name.substr(0, slash))) return name.substr(0, slash);
    const std::string under = name + "/";
    const auto it = names.lower_bound(under);
    if (it != names.end() && it->compare(0, under.size(), under) == 0) return *it;
    return std::string();
}

Status check_tiling(const TensorInfo &t) {
    // Exact tiling = every slice inside the shape (checked by the parser / writer), no two
    // slices overlapping, and volumes adding up to the whole. A virtual dataset fills holes
    // with zeros silently, so a hole must be an error here.
    std::vector<const SourceRef *> order;
    for (const auto &s : t.sources) order.push_back(&s);
    std::sort(order.begin(), order.end(),
              [](const SourceRef *a, const SourceRef *b) { return a->offset < b->offset; });
    std::uint64_t volume = 0;
    const std::uint64_t total = element_count(t.shape);
    for (std::size_t i = 0; i < order.size(); ++i) {
        const SourceRef &a = *order[i];
        volume += element_count(a.count);
        if (volume > total) break;
        // Only slices starting before `a` ends in dimension 0 can overlap it.
        for (std::size_t j = i + 1; j < order.size(); ++j) {
            const SourceRef &b = *order[j];
            if (b.offset[0] >= a.offset[0] + a.count[0]) break;
            bool overlap = true;
            for (std::size_t d = 0; d < t.shape.size() && overlap; ++d)
                overlap = b.offset[d] < a.offset[d] + a.count[d] &&
                          a.offset[d] < b.offset[d] + b.count[d];
            if (overlap)
                return make_error("tensor " + t.name + ": slices at " + shape_string(a.offset) +
                                  " (writer " + std::to_string(a.writer) + ") and " +
                                  shape_string(b.offset) + " (writer " +
                                  std::to_string(b.writer) + ") overlap");
        }
    }
    if (volume != total)
        return make_error("tensor " + t.name + " " + shape_string(t.shape) + ": its " +
                          std::to_string(t.sources.size()) + " slices cover " +
                          (volume > total ? "more than" : "only " + std::to_string(volume) + " of") +
                          " " + std::to_string(total) +
                          " elements; every element must be written by exactly one rank");
    return Status::success();
}

std::string shape_string(const Shape &s) {
    std::string out = "[";
    for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
    return out + "]";
}

std::string hex64(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return buf;
}

std::string file_ref_checkpoint(const std::string &file) {
    if (file.compare(0, 3, "../") != 0) return {};
    const auto slash = file.find('/', 3);
    return file.substr(3, slash - 3);
}

std::string rebase_file_ref(const std::string &file, const std::string &from_name) {
    if (file.compare(0, 3, "../") == 0) return file;   // already names its sibling
    return "../" + from_name + "/" + file;
}


namespace {

// The manifests are written by hand rather than through nlohmann::json: building a JSON
// document of every slice and dumping it was most of the CPU time of finishing a shard and a
// fifth of writing index.h5 (measured: 0.57 ms of 3.2 ms for 200 slices), and both lie on the
// critical path of every checkpoint. The output is the same text nlohmann::json::dump()
// gives (compact, keys in sorted order); test/fuzz_manifest.cc checks that it parses back to
// the same manifest. Values that may hold arbitrary text (unit layout, scheduler kind) and
// the floating-point learning rate still go through nlohmann, which also rejects invalid
// UTF-8 as before.

void put_u64(std::string &o, std::uint64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    o.append(buf, r.ptr);
}

void put_str(std::string &o, const std::string &s) {
    for (unsigned char c : s)
        if (c >= 0x80) {
            o += json(s).dump();   // non-ASCII: nlohmann validates the UTF-8
            return;
        }
    o += '"';
    for (unsigned char c : s) {
        switch (c) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\b': o += "\\b"; break;
        case '\f': o += "\\f"; break;
        case '\n': o += "\\n"; break;
        case '\r': o += "\\r"; break;
        case '\t': o += "\\t"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                o += buf;
            } else {
                o += static_cast<char>(c);
            }
        }
    }
    o += '"';
}

void put_shape(std::string &o, const Shape &s) {
    o += '[';
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (i) o += ',';
        put_u64(o, s[i]);
    }
    o += ']';
}

void put_tensor(std::string &o, const TensorInfo &t) {
    o += "{\"dtype\":";
    put_str(o, dtype_name(t.dtype));
    o += ",\"name\":";
    put_str(o, t.name);
    o += ",\"shape\":";
    put_shape(o, t.shape);
    o += ",\"sources\":[";
    for (std::size_t i = 0; i < t.sources.size(); ++i) {
        const SourceRef &s = t.sources[i];
        if (i) o += ',';
        o += "{\"count\":";
        put_shape(o, s.count);
        if (s.data_offset) {
            o += ",\"data_offset\":";
            put_u64(o, s.data_offset);
        }
        o += ",\"dataset\":";
        put_str(o, s.dataset);
        o += ",\"file\":";
        put_str(o, s.file);
        o += ",\"offset\":";
        put_shape(o, s.offset);
        o += ",\"writer\":";
        put_u64(o, s.writer);
        o += ",\"xxh3\":\"";
        o += hex64(s.xxh3);
        o += "\"}";
    }
    o += "]}";
}

void put_tensors(std::string &o, const std::vector<TensorInfo> &tensors) {
    o += '[';
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        if (i) o += ',';
        put_tensor(o, tensors[i]);
    }
    o += ']';
}

void put_rank_states(std::string &o, const std::vector<RankStateInfo> &states) {
    o += '[';
    for (std::size_t i = 0; i < states.size(); ++i) {
        const RankStateInfo &r = states[i];
        if (i) o += ',';
        o += "{\"consumed\":";
        put_u64(o, r.consumed);
        o += ",\"rank\":";
        put_u64(o, r.rank);
        o += ",\"rng_bytes\":";
        put_u64(o, r.rng_bytes);
        o += ",\"xxh3\":\"";
        o += hex64(r.xxh3);
        o += "\"}";
    }
    o += ']';
}

}  // namespace

std::string manifest_to_json(const Manifest &m) {
    std::string o;
    o.reserve(256 + m.tensors.size() * 256);
    o += "{\"created_unix\":";
    put_u64(o, m.created_unix);
    o += ",\"format_version\":";
    put_u64(o, m.format_version);
    o += ",\"generation\":";
    put_u64(o, m.meta.generation);
    o += ",\"ledger\":{\"epoch\":";
    put_u64(o, m.meta.ledger.epoch);
    o += ",\"seed\":";
    put_u64(o, m.meta.ledger.seed);
    o += "},\"lr_scheduler\":";
    o += json{{"kind", m.meta.lr.kind},
              {"base_lr", m.meta.lr.base_lr},
              {"warmup_steps", m.meta.lr.warmup_steps},
              {"total_steps", m.meta.lr.total_steps},
              {"last_step", m.meta.lr.last_step}}
             .dump();
    o += ",\"rank_states\":";
    put_rank_states(o, m.rank_states);
    o += ",\"step\":";
    put_u64(o, m.meta.step);
    o += ",\"tensors\":";
    put_tensors(o, m.tensors);
    o += ",\"unit_layout\":";
    put_str(o, m.meta.unit_layout);
    o += ",\"world_size\":";
    put_u64(o, m.meta.world_size);
    o += ",\"writers\":";
    put_u64(o, m.writers);
    o += '}';
    return o;
}

std::string shard_manifest_to_json(const ShardManifest &m) {
    std::string o;
    o.reserve(256 + m.tensors.size() * 256);
    o += "{\"attempt\":";
    put_str(o, m.attempt);
    o += ",\"format_version\":";
    put_u64(o, m.format_version);
    o += ",\"rank\":";
    put_u64(o, m.rank);
    o += ",\"rank_states\":";
    put_rank_states(o, m.rank_states);
    o += ",\"step\":";
    put_u64(o, m.step);
    o += ",\"tensors\":";
    put_tensors(o, m.tensors);
    o += '}';
    return o;
}

}  // namespace ckpt
}  // namespace omni
