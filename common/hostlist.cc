// Slurm host lists; see common/hostlist.h for the contract.
#include "common/hostlist.h"

#include <cstdint>

#include "common/parse.h"

namespace omni {
namespace {

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}
bool digit(char c) { return c >= '0' && c <= '9'; }

// One number range of a bracket: [lo, hi] written `width` wide (0: as is).
struct Range {
    std::uint64_t lo = 0, hi = 0;
    std::size_t width = 0;
};

// The pieces of one name: literal text, then bracket alternatives, alternating.
struct Piece {
    std::string text;             // literal
    std::vector<Range> ranges;    // empty: a literal piece
};

constexpr std::uint64_t kMaxNumber = 999999999;  // 9 digits: names stay short, no overflow

std::string number(std::uint64_t v, std::size_t width) {
    std::string s = std::to_string(v);
    if (s.size() < width) s.insert(0, width - s.size(), '0');
    return s;
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view text, std::string_view what,
                                                 std::size_t max_hosts) {
    const std::string w(what);
    if (text.size() > kMaxValueLength)
        return make_error(w + ": longer than " + std::to_string(kMaxValueLength) + " bytes");
    auto bad = [&](const std::string &why) {
        return make_error(w + ": " + quoted(text) + ": " + why +
                          "; expected a Slurm host list such as 'node[01-04,7],login1'");
    };
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < text.size()) {
        // One name with its brackets, up to a comma outside brackets or the end.
        std::vector<Piece> pieces;
        std::uint64_t count = 1;
        while (i < text.size() && text[i] != ',') {
            if (text[i] == '[') {
                Piece p;
                ++i;
                for (;;) {
                    Range r;
                    std::size_t start = i;
                    while (i < text.size() && digit(text[i])) ++i;
                    if (i == start) return bad("a bracket needs numbers");
                    if (i - start > 9) return bad("a number longer than 9 digits");
                    auto lo = parse_uint(text.substr(start, i - start), 0, kMaxNumber, w);
                    if (!lo) return Error{lo.error()};
                    r.lo = r.hi = lo.value();
                    r.width = text[start] == '0' && i - start > 1 ? i - start : 0;
                    if (i < text.size() && text[i] == '-') {
                        std::size_t s2 = ++i;
                        while (i < text.size() && digit(text[i])) ++i;
                        if (i == s2) return bad("a range needs an end");
                        if (i - s2 > 9) return bad("a number longer than 9 digits");
                        auto hi = parse_uint(text.substr(s2, i - s2), 0, kMaxNumber, w);
                        if (!hi) return Error{hi.error()};
                        r.hi = hi.value();
                        if (r.hi < r.lo) return bad("a range runs backwards");
                        if (r.width == 0 && text[s2] == '0' && i - s2 > 1) r.width = i - s2;
                    }
                    p.ranges.push_back(r);
                    if (i < text.size() && text[i] == ',') {
                        ++i;
                        continue;
                    }
                    if (i < text.size() && text[i] == ']') {
                        ++i;
                        break;
                    }
                    return bad("an unclosed bracket");
                }
                std::uint64_t n = 0;
                for (const auto &r : p.ranges) n += r.hi - r.lo + 1;  // each <= 1e9, few ranges
                if (n > max_hosts || count * n > max_hosts)
                    return bad("more than " + std::to_string(max_hosts) + " names");
                count *= n;
                pieces.push_back(std::move(p));
            } else if (name_char(text[i])) {
                if (pieces.empty() || !pieces.back().ranges.empty()) pieces.emplace_back();
                pieces.back().text += text[i];
                ++i;
            } else if (text[i] == ']') {
                return bad("a ']' without '['");
            } else {
                return bad("the character " + quoted(text.substr(i, 1)) + " is not allowed in a name");
            }
        }
        if (pieces.empty()) return bad("an empty name");
        if (out.size() + count > max_hosts) return bad("more than " + std::to_string(max_hosts) + " names");
        // Multiply out, the last bracket fastest.
        std::vector<std::string> names = {""};
        for (const auto &p : pieces) {
            std::vector<std::string> next;
            if (p.ranges.empty()) {
                for (auto &n : names) next.push_back(n + p.text);
            } else {
                for (const auto &n : names)
                    for (const auto &r : p.ranges)
                        for (std::uint64_t v = r.lo; v <= r.hi; ++v) next.push_back(n + number(v, r.width));
            }
            names = std::move(next);
        }
        for (auto &n : names) {
            if (n.size() > kMaxHostNameLength)
                return bad("the name " + quoted(n) + " is longer than " +
                           std::to_string(kMaxHostNameLength) + " characters");
            out.push_back(std::move(n));
        }
        if (i < text.size()) {
            ++i;  // the comma
            if (i == text.size()) return bad("a trailing comma");
        }
    }
    return out;
}

std::string compress_hostlist(const std::vector<std::string> &hosts) {
    // A name's prefix and trailing number (digits, possibly zero-padded).
    struct Split {
        std::string prefix, digits;
    };
    auto split = [](const std::string &h) {
        std::size_t k = h.size();
        while (k > 0 && digit(h[k - 1])) --k;
        return Split{h.substr(0, k), h.substr(k)};
    };
    auto padded = [](const std::string &d) { return d.size() > 1 && d[0] == '0'; };
    std::string out;
    std::size_t i = 0;
    while (i < hosts.size()) {
        if (!out.empty()) out += ',';
        const Split first = split(hosts[i]);
        if (first.digits.empty() || first.digits.size() > 9) {
            out += hosts[i++];
            continue;
        }
        // Neighbours with the same prefix whose numbers read back the same inside one bracket:
        // a zero-padded group writes every number at its width, so its members have that
        // width; an unpadded group takes numbers without leading zeros.
        const bool pad = padded(first.digits);
        const std::size_t width = pad ? first.digits.size() : 0;
        std::vector<std::uint64_t> numbers;
        std::size_t j = i;
        for (; j < hosts.size(); ++j) {
            Split s = split(hosts[j]);
            if (s.prefix != first.prefix || s.digits.empty() || s.digits.size() > 9) break;
            if (pad ? s.digits.size() != width : padded(s.digits)) break;
            numbers.push_back(std::stoull(s.digits));
        }
        if (numbers.size() == 1) {
            out += hosts[i++];
            continue;
        }
        // Runs of consecutive numbers, in the order given.
        out += first.prefix + "[";
        for (std::size_t k = 0; k < numbers.size();) {
            std::size_t e = k;
            while (e + 1 < numbers.size() && numbers[e + 1] == numbers[e] + 1) ++e;
            if (k > 0) out += ',';
            out += number(numbers[k], width);
            if (e > k) out += "-" + number(numbers[e], width);
            k = e + 1;
        }
        out += "]";
        i = j;
    }
    return out;
}

}  // namespace omni
