// Value types of the node model: BDFs, CPU lists, path and domain names.
#include <algorithm>
#include <cstdio>
#include <tuple>

#include "common/parse.h"
#include "hal/model.h"

namespace omni::hal {
namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Quote a value for a message, cut short and with control bytes escaped: the text may come
// from a file or a command line we do not trust.
std::string quoted(std::string_view text) {
    std::string out = "'";
    for (std::size_t i = 0; i < text.size() && i < 64; ++i) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    if (text.size() > 64) out += "...";
    return out + "'";
}

std::string prefix(std::string_view what) {
    return what.empty() ? std::string() : std::string(what) + ": ";
}

}  // namespace

bool Bdf::operator<(const Bdf &o) const {
    return std::tie(domain, bus, device, function) <
           std::tie(o.domain, o.bus, o.device, o.function);
}

std::string Bdf::format() const {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, device, function);
    return buf;
}

Result<Bdf> parse_bdf(std::string_view text, std::string_view what) {
    // Exactly 12 characters; positions 4 and 7 are ':' and 10 is '.'. Shorter kernel-internal
    // forms ("3b:00.0") are rejected on purpose: a BDF without its domain is ambiguous on
    // multi-segment machines (the POWER8 fixture has domains 0002..000b).
    const auto bad = [&](const char *why) {
        return make_error(prefix(what) + quoted(text) + " is not a PCI address (" + why +
                          "); expected " + kBdfForm);
    };
    if (text.size() != 12) return bad("wrong length");
    if (text[4] != ':' || text[7] != ':' || text[10] != '.') return bad("wrong separators");
    unsigned v[4] = {0, 0, 0, 0};
    const std::size_t start[4] = {0, 5, 8, 11};
    const std::size_t len[4] = {4, 2, 2, 1};
    for (int f = 0; f < 4; ++f) {
        for (std::size_t i = 0; i < len[f]; ++i) {
            const int h = hex_value(text[start[f] + i]);
            if (h < 0) return bad("not hexadecimal");
            v[f] = v[f] * 16 + static_cast<unsigned>(h);
        }
    }
    if (v[2] > 0x1f) return bad("device above 1f");
    if (v[3] > 7) return bad("function above 7");
    Bdf b;
    b.domain = static_cast<std::uint16_t>(v[0]);
    b.bus = static_cast<std::uint8_t>(v[1]);
    b.device = static_cast<std::uint8_t>(v[2]);
    b.function = static_cast<std::uint8_t>(v[3]);
    return b;
}

std::string format_cpulist(const std::vector<unsigned> &cpus) {
    std::vector<unsigned> s(cpus);
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    std::string out;
    for (std::size_t i = 0; i < s.size();) {
        std::size_t j = i;
        while (j + 1 < s.size() && s[j + 1] == s[j] + 1) ++j;
        if (!out.empty()) out += ',';
        out += std::to_string(s[i]);
        if (j > i) out += '-' + std::to_string(s[j]);
        i = j + 1;
    }
    return out;
}

Result<std::vector<unsigned>> parse_cpulist(std::string_view text, unsigned max_cpu,
                                            std::string_view what) {
    const std::string form =
        "expected a CPU list such as 0-3,8 with numbers in 0.." + std::to_string(max_cpu);
    std::vector<unsigned> out;
    if (text.empty()) return out;  // the kernel writes an empty line for "no CPUs"
    if (text.size() > kMaxValueLength)
        return make_error(prefix(what) + "CPU list too long; " + form);
    std::size_t pos = 0;
    while (pos <= text.size()) {
        const std::size_t comma = std::min(text.find(',', pos), text.size());
        const std::string_view item = text.substr(pos, comma - pos);
        const std::size_t dash = item.find('-');
        auto lo = parse_uint(item.substr(0, dash), 0, max_cpu, "");
        if (!lo) return make_error(prefix(what) + quoted(text) + ": " + form);
        std::uint64_t hi = lo.value();
        if (dash != std::string_view::npos) {
            auto h = parse_uint(item.substr(dash + 1), 0, max_cpu, "");
            if (!h || h.value() < lo.value())
                return make_error(prefix(what) + quoted(text) + ": " + form);
            hi = h.value();
        }
        for (std::uint64_t c = lo.value(); c <= hi; ++c) out.push_back(static_cast<unsigned>(c));
        pos = comma + 1;
        if (comma == text.size()) break;
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::string path_name(const Path &p) {
    switch (p.type) {
        case PathType::Self: return "X";
        case PathType::NV: return "NV" + std::to_string(p.nvlinks);
        case PathType::PIX: return "PIX";
        case PathType::PXB: return "PXB";
        case PathType::PHB: return "PHB";
        case PathType::NODE: return "NODE";
        case PathType::SYS: return "SYS";
    }
    return "SYS";
}

const char *domain_kind_name(DomainKind kind) {
    switch (kind) {
        case DomainKind::Pcie: return "pcie";
        case DomainKind::Nvlink: return "nvlink";
        case DomainKind::Numa: return "numa";
        case DomainKind::Node: return "node";
    }
    return "node";
}

Result<DomainKind> parse_domain_kind(std::string_view text, std::string_view what) {
    static const std::vector<std::string> names = {"pcie", "nvlink", "numa", "node"};
    auto c = parse_choice(text, names, what);
    if (!c) return make_error(c.error());
    for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == c.value()) return static_cast<DomainKind>(i);
    return make_error(prefix(what) + "unknown domain kind");
}

std::string slurm_type(const std::string &model) {
    std::string out;
    bool pending = false;
    for (char ch : model) {
        char c = ch;
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        const bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
        if (!keep) {
            pending = !out.empty();
            continue;
        }
        if (pending) out += '_';
        pending = false;
        out += c;
    }
    return out.empty() ? "gpu" : out;
}

int Node::gpu_position(unsigned index) const {
    for (std::size_t i = 0; i < gpus.size(); ++i)
        if (gpus[i].index == index) return static_cast<int>(i);
    return -1;
}

}  // namespace omni::hal
