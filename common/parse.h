/* slurm-omni: strict parsers for user input shared by every component.
 *
 * The SPANK plugin parses these strings inside sbatch and, as root, inside slurmstepd; the
 * commands parse them from their command lines. All of them:
 *  - accept exactly the documented form (no sign, no whitespace, no trailing junk);
 *  - never allocate in proportion to untrusted input beyond a copy of bounded strings;
 *  - return an omni::Error whose message names `what` (the option or key), quotes the value
 *    and says what was expected, e.g.
 *      "--omni-elastic: '0:4': MIN must be an integer in 1..1024".
 * No function throws.
 */
#ifndef OMNI_PARSE_H
#define OMNI_PARSE_H

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "omni/result.h"

namespace omni {

/* Longest value any parser accepts; longer input is rejected before it is looked at. */
constexpr std::size_t kMaxValueLength = 4096;

/* `text` as error messages show it: in single quotes, control characters as \xHH, cut after
 * 64 characters with "...". */
std::string quoted(std::string_view text);

/* A decimal unsigned integer in [min, max]. Leading zeros are accepted ("007" is 7);
 * anything but digits, an empty string, or a value beyond uint64 is an error. */
Result<std::uint64_t> parse_uint(std::string_view text, std::uint64_t min, std::uint64_t max,
                                 std::string_view what);

/* "A:B" with both parts parse_uint in [min, max] and A <= B. `sep` separates the parts. */
Result<std::pair<std::uint64_t, std::uint64_t>> parse_range(std::string_view text, char sep,
                                                            std::uint64_t min, std::uint64_t max,
                                                            std::string_view what);

/* "yes"/"no" (also "true"/"false", "1"/"0", case-sensitive lower case). */
Result<bool> parse_yes_no(std::string_view text, std::string_view what);

/* One of `choices`, exactly. The error lists the choices. */
Result<std::string> parse_choice(std::string_view text, const std::vector<std::string> &choices,
                                 std::string_view what);

/* A value that is safe to place into a process environment: at most `max_len` bytes, no
 * NUL, newline or carriage return, printable ASCII or UTF-8 bytes only. */
Status check_env_value(std::string_view name, std::string_view value,
                       std::size_t max_len = kMaxValueLength);

struct KeyValue {
    std::string key;
    std::string value;
};

/* Plugin arguments in `key=value` form (as in plugstack.conf). Every key must be in
 * `allowed`; an unknown key, a missing '=', an empty key, or a repeated key is an error
 * naming the argument. */
Result<std::vector<KeyValue>> parse_key_values(const std::vector<std::string> &args,
                                               const std::vector<std::string> &allowed,
                                               std::string_view what);

/* Joins items with `sep`; used to list choices and unit counts in messages. */
std::string join(const std::vector<std::string> &items, std::string_view sep);

}  // namespace omni

#endif
