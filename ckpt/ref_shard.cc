// Reference shards (plain files for ranks without tensor data); see ref_shard.h.
#include "ref_shard.h"

#include <cstring>

#include "hash.h"

namespace omni {
namespace ckpt {

namespace {

constexpr char kMagic[8] = {'o', 'm', 'n', 'i', '-', 'r', 'e', 'f'};
constexpr std::size_t kHeaderBytes = 32;   // magic, version, J, P
constexpr std::size_t kTrailerBytes = 8;   // XXH3-64

void put_u64(std::string &out, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(const char *p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
}

// Bytes of one rank state in the file, or 0 with `ok` false when it cannot be represented.
std::uint64_t state_bytes(const RankStateInfo &info, bool &ok) {
    if (info.consumed > (UINT64_MAX - info.rng_bytes) / 8) {
        ok = false;
        return 0;
    }
    return info.rng_bytes + 8 * info.consumed;
}

}  // namespace

std::string encode_ref_shard(const ShardManifest &m, const std::vector<RankState> &states) {
    const std::string json = shard_manifest_to_json(m);
    std::uint64_t payload = 0;
    for (const auto &s : states) payload += s.rng.size() + 8 * s.consumed.size();
    std::string out;
    out.reserve(kHeaderBytes + json.size() + payload + kTrailerBytes);
    out.append(kMagic, sizeof kMagic);
    put_u64(out, m.format_version);
    put_u64(out, json.size());
    put_u64(out, payload);
    out += json;
    for (const auto &s : states) {
        out.append(reinterpret_cast<const char *>(s.rng.data()), s.rng.size());
        for (std::int64_t v : s.consumed) put_u64(out, static_cast<std::uint64_t>(v));
    }
    put_u64(out, xxh3(out.data(), out.size()));
    return out;
}

Result<ShardRecord> parse_ref_shard(const std::string &bytes) {
    const std::size_t n = bytes.size();
    if (n < kHeaderBytes + kTrailerBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
        return make_error("not a reference shard (expected the 8 bytes 'omni-ref' and a 40-byte minimum)");
    const char *p = bytes.data();
    const std::uint64_t version = get_u64(p + 8), json_len = get_u64(p + 16), payload = get_u64(p + 24);
    if (version != kFormatVersion)
        return make_error("format version " + std::to_string(version) +
                          " is not supported; this omni-ckpt reads version " + std::to_string(kFormatVersion));
    // Compared one by one, so no sum can overflow: the lengths must describe exactly this file.
    const std::uint64_t body = n - kHeaderBytes - kTrailerBytes;
    if (json_len > kMaxManifestBytes || json_len > body || payload != body - json_len)
        return make_error("lengths do not match the file: manifest " + std::to_string(json_len) +
                          " and rank states " + std::to_string(payload) + " bytes in a body of " +
                          std::to_string(body));
    const std::uint64_t stored = get_u64(p + n - kTrailerBytes), actual = xxh3(p, n - kTrailerBytes);
    if (stored != actual)
        return make_error("checksum mismatch (stored " + hex64(stored) + ", data " + hex64(actual) + ")");
    auto m = parse_shard_manifest(bytes.substr(kHeaderBytes, json_len));
    if (!m) return make_error(m.error());
    ShardRecord out;
    out.manifest = std::move(m.value());
    std::uint64_t need = 0;
    bool ok = true;
    for (const auto &info : out.manifest.rank_states) {
        const std::uint64_t b = state_bytes(info, ok);
        if (!ok || b > payload - need) {
            ok = false;
            break;
        }
        need += b;
    }
    if (!ok || need != payload)
        return make_error("the rank states in the manifest do not add up to the " + std::to_string(payload) +
                          " bytes stored");
    const char *s = p + kHeaderBytes + json_len;
    for (const auto &info : out.manifest.rank_states) {
        RankState st;
        st.rank = info.rank;
        st.rng.assign(reinterpret_cast<const std::uint8_t *>(s), reinterpret_cast<const std::uint8_t *>(s) + info.rng_bytes);
        s += info.rng_bytes;
        st.consumed.resize(info.consumed);
        for (auto &v : st.consumed) {
            v = static_cast<std::int64_t>(get_u64(s));
            s += 8;
        }
        out.states.push_back(std::move(st));
    }
    return out;
}

}  // namespace ckpt
}  // namespace omni
