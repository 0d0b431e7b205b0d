// Unit tests for the strict input parsers (common/parse.h).
#include <gtest/gtest.h>

#include <string>

#include "common/parse.h"

using omni::parse_choice;
using omni::parse_key_values;
using omni::parse_range;
using omni::parse_uint;
using omni::parse_yes_no;

TEST(ParseUint, AcceptsPlainDecimal) {
    auto r = parse_uint("42", 0, 100, "--x");
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.value(), 42u);
    EXPECT_EQ(parse_uint("007", 0, 100, "--x").value(), 7u);
    EXPECT_EQ(parse_uint("18446744073709551615", 0, UINT64_MAX, "--x").value(), UINT64_MAX);
}

TEST(ParseUint, RejectsEverythingElseNamingTheOption) {
    for (const char *bad : {"", "-1", "+1", " 1", "1 ", "1x", "0x10", "1.0", "abc", "1:2"}) {
        auto r = parse_uint(bad, 0, 100, "--omni-mp");
        ASSERT_FALSE(r.ok()) << "accepted '" << bad << "'";
        EXPECT_EQ(r.error().rfind("--omni-mp: ", 0), 0u) << r.error();
        EXPECT_NE(r.error().find("expected an integer in 0..100"), std::string::npos) << r.error();
    }
}

TEST(ParseUint, RejectsOverflowAndRange) {
    auto over = parse_uint("18446744073709551616", 0, UINT64_MAX, "--n");  // 2^64
    ASSERT_FALSE(over.ok());
    EXPECT_NE(over.error().find("too large"), std::string::npos) << over.error();
    auto zero = parse_uint("0", 1, 8, "--n");
    ASSERT_FALSE(zero.ok());
    EXPECT_EQ(zero.error(), "--n: '0' is out of range; expected an integer in 1..8");
    EXPECT_FALSE(parse_uint("9", 1, 8, "--n").ok());
}

TEST(ParseUint, QuotesControlCharactersAndCutsLongValues) {
    auto r = parse_uint(std::string("1\n2"), 0, 9, "--n");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("'1\\x0a2'"), std::string::npos) << r.error();
    std::string longv(200, 'a');
    auto l = parse_uint(longv, 0, 9, "--n");
    ASSERT_FALSE(l.ok());
    EXPECT_LT(l.error().size(), 160u) << l.error();
    auto huge = parse_uint(std::string(omni::kMaxValueLength + 1, '1'), 0, 9, "--n");
    ASSERT_FALSE(huge.ok());
    EXPECT_NE(huge.error().find("too long"), std::string::npos);
}

TEST(ParseRange, AcceptsMinMax) {
    auto r = parse_range("2:8", ':', 1, 1024, "--omni-elastic");
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.value().first, 2u);
    EXPECT_EQ(r.value().second, 8u);
    auto same = parse_range("3:3", ':', 1, 1024, "--omni-elastic");
    ASSERT_TRUE(same.ok());
    EXPECT_EQ(same.value().first, 3u);
}

TEST(ParseRange, RejectsBadForms) {
    for (const char *bad : {"", ":", "2", "2:", ":8", "8:2", "0:4", "1:2000", "1:2:3", "a:b", "1-4"}) {
        auto r = parse_range(bad, ':', 1, 1024, "--omni-elastic");
        ASSERT_FALSE(r.ok()) << "accepted '" << bad << "'";
        EXPECT_EQ(r.error().rfind("--omni-elastic: '", 0), 0u) << r.error();
    }
    EXPECT_NE(parse_range("8:2", ':', 1, 1024, "--e").error().find("MIN is greater than MAX"),
              std::string::npos);
}

TEST(ParseYesNo, Forms) {
    EXPECT_TRUE(parse_yes_no("yes", "bind").value());
    EXPECT_FALSE(parse_yes_no("no", "bind").value());
    auto r = parse_yes_no("Yes", "bind");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), "bind: 'Yes': expected yes or no");
}

TEST(ParseChoice, ListsChoices) {
    const std::vector<std::string> kinds{"pcie", "nvlink", "numa", "node"};
    EXPECT_EQ(parse_choice("numa", kinds, "domain").value(), "numa");
    auto r = parse_choice("rack", kinds, "domain");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), "domain: 'rack': expected one of pcie|nvlink|numa|node");
}

TEST(CheckEnvValue, RejectsControlCharactersAndLength) {
    EXPECT_TRUE(omni::check_env_value("OMNI_CKPT_DIR", "/scratch/ckpt").ok());
    EXPECT_FALSE(omni::check_env_value("V", std::string("a\0b", 3)).ok());
    EXPECT_FALSE(omni::check_env_value("V", "a\nb").ok());
    EXPECT_FALSE(omni::check_env_value("V", "a\rb").ok());
    EXPECT_FALSE(omni::check_env_value("V", std::string(11, 'x'), 10).ok());
    EXPECT_TRUE(omni::check_env_value("V", std::string(10, 'x'), 10).ok());
}

TEST(ParseKeyValues, AcceptsKnownKeys) {
    auto r = parse_key_values({"topology=/etc/omni/site.json", "bind=no"},
                              {"topology", "bind", "max_units"}, "spank/omni");
    ASSERT_TRUE(r.ok()) << r.error();
    ASSERT_EQ(r.value().size(), 2u);
    EXPECT_EQ(r.value()[0].key, "topology");
    EXPECT_EQ(r.value()[0].value, "/etc/omni/site.json");
    EXPECT_EQ(r.value()[1].value, "no");
}

TEST(ParseKeyValues, RejectsUnknownMissingAndRepeated) {
    const std::vector<std::string> allowed{"bind", "max_units"};
    auto unknown = parse_key_values({"bnid=yes"}, allowed, "spank/omni");
    ASSERT_FALSE(unknown.ok());
    EXPECT_EQ(unknown.error(),
              "spank/omni: unknown key 'bnid' in 'bnid=yes'; expected one of bind, max_units");
    EXPECT_FALSE(parse_key_values({"bind"}, allowed, "p").ok());
    EXPECT_FALSE(parse_key_values({"=yes"}, allowed, "p").ok());
    EXPECT_FALSE(parse_key_values({"bind=yes", "bind=no"}, allowed, "p").ok());
    EXPECT_FALSE(parse_key_values({"bind=y\nes"}, allowed, "p").ok());
}

TEST(Result, HoldsValueOrError) {
    omni::Result<std::string> good(std::string("x"));
    omni::Result<std::string> bad(omni::make_error("boom"));
    EXPECT_TRUE(good.ok());
    EXPECT_EQ(good.value(), "x");
    EXPECT_FALSE(bad.ok());
    EXPECT_EQ(bad.error(), "boom");
    omni::Status s = omni::make_error("no");
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(omni::Status::success().ok());
}
