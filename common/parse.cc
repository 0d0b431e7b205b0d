// Strict parsers for user input; see common/parse.h for the contract.
#include "common/parse.h"

#include <algorithm>
#include <limits>

namespace omni {
// Quote a value for an error message, cutting it short so a huge input cannot make a huge
// message (the input may come from an untrusted user inside a root daemon).
std::string quoted(std::string_view text) {
    constexpr std::size_t kShown = 64;
    std::string out = "'";
    for (std::size_t i = 0; i < text.size() && i < kShown; ++i) {
        unsigned char c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (text.size() > kShown) out += "...";
    out += "'";
    return out;
}

namespace {

std::string quote(std::string_view text) { return quoted(text); }

std::string prefix(std::string_view what) {
    return what.empty() ? std::string() : std::string(what) + ": ";
}

}  // namespace

std::string join(const std::vector<std::string> &items, std::string_view sep) {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += sep;
        out += items[i];
    }
    return out;
}

Result<std::uint64_t> parse_uint(std::string_view text, std::uint64_t min, std::uint64_t max,
                                 std::string_view what) {
    const std::string expected =
        "expected an integer in " + std::to_string(min) + ".." + std::to_string(max);
    if (text.empty()) return make_error(prefix(what) + "empty value; " + expected);
    if (text.size() > kMaxValueLength)
        return make_error(prefix(what) + "value too long; " + expected);
    std::uint64_t v = 0;
    for (char ch : text) {
        if (ch < '0' || ch > '9')
            return make_error(prefix(what) + quote(text) + " is not a number; " + expected);
        const std::uint64_t d = static_cast<std::uint64_t>(ch - '0');
        if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10)
            return make_error(prefix(what) + quote(text) + " is too large; " + expected);
        v = v * 10 + d;
    }
    if (v < min || v > max)
        return make_error(prefix(what) + quote(text) + " is out of range; " + expected);
    return v;
}

Result<std::pair<std::uint64_t, std::uint64_t>> parse_range(std::string_view text, char sep,
                                                            std::uint64_t min, std::uint64_t max,
                                                            std::string_view what) {
    const std::string form = std::string("expected MIN") + sep + "MAX with " +
                             std::to_string(min) + " <= MIN <= MAX <= " + std::to_string(max);
    const auto pos = text.find(sep);
    if (pos == std::string_view::npos || text.find(sep, pos + 1) != std::string_view::npos)
        return make_error(prefix(what) + quote(text) + ": " + form);
    auto lo = parse_uint(text.substr(0, pos), min, max, "");
    if (!lo) return make_error(prefix(what) + quote(text) + ": MIN: " + lo.error());
    auto hi = parse_uint(text.substr(pos + 1), min, max, "");
    if (!hi) return make_error(prefix(what) + quote(text) + ": MAX: " + hi.error());
    if (lo.value() > hi.value())
        return make_error(prefix(what) + quote(text) + ": MIN is greater than MAX; " + form);
    return std::make_pair(lo.value(), hi.value());
}

Result<bool> parse_yes_no(std::string_view text, std::string_view what) {
    if (text == "yes" || text == "true" || text == "1") return true;
    if (text == "no" || text == "false" || text == "0") return false;
    return make_error(prefix(what) + quote(text) + ": expected yes or no");
}

Result<std::string> parse_choice(std::string_view text, const std::vector<std::string> &choices,
                                 std::string_view what) {
    for (const auto &c : choices)
        if (text == c) return c;
    return make_error(prefix(what) + quote(text) + ": expected one of " + join(choices, "|"));
}

Status check_env_value(std::string_view name, std::string_view value, std::size_t max_len) {
    if (value.size() > max_len)
        return make_error(std::string(name) + ": value is " + std::to_string(value.size()) +
                          " bytes; at most " + std::to_string(max_len) + " allowed");
    for (char ch : value) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (c == 0 || c == '\n' || c == '\r' || (c < 0x20 && c != '\t') || c == 0x7f)
            return make_error(std::string(name) + ": " + quote(value) +
                              " contains a control character; expected printable text");
    }
    return Status::success();
}

Result<std::vector<KeyValue>> parse_key_values(const std::vector<std::string> &args,
                                               const std::vector<std::string> &allowed,
                                               std::string_view what) {
    std::vector<KeyValue> out;
    for (const auto &arg : args) {
        const auto eq = arg.find('=');
        if (eq == std::string::npos || eq == 0)
            return make_error(prefix(what) + "argument " + quote(arg) +
                              ": expected key=value with key one of " + join(allowed, ", "));
        KeyValue kv{arg.substr(0, eq), arg.substr(eq + 1)};
        if (std::find(allowed.begin(), allowed.end(), kv.key) == allowed.end())
            return make_error(prefix(what) + "unknown key " + quote(kv.key) + " in " + quote(arg) +
                              "; expected one of " + join(allowed, ", "));
        for (const auto &seen : out)
            if (seen.key == kv.key)
                return make_error(prefix(what) + "key " + quote(kv.key) + " given twice");
        if (auto st = check_env_value(kv.key, kv.value); !st)
            return make_error(prefix(what) + st.error());
        out.push_back(std::move(kv));
    }
    return out;
}

}  // namespace omni
