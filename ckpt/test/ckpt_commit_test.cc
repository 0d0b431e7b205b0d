// Commit validation, writer validation, reference shards, the manifest parser and the
// small pieces (bounded map, hash, names) of libomni-ckpt.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "config.h"
#include "ckpt/blocks.h"
#include "ckpt/bounded_map.h"
#include "ckpt/box.h"
#include "ckpt/format.h"
#include "ckpt/fsio.h"
#include "ckpt/h5.h"
#include "ckpt/hash.h"
#include "ckpt/ref_shard.h"
#include "ckpt/writer_internal.h"
#include "omni/ckpt_cpp.h"

#include "test_util.h"
#include "unit_helpers.h"

using namespace omni::ckpt;
namespace t = omni::ckpt::test;
using t::TempDir;

using namespace t;


TEST(Commit, RejectsOverlapsHolesMissingShardsAndMismatches) {
    TempDir d;
    const std::string root = d / "root";
    const std::vector<float> data(8, 1.0f);
    auto shard = [&](std::uint64_t step, std::uint32_t w, Shape shape, Shape off, Shape cnt,
                     DType dt = DType::fp32) {
        auto sw = ShardWriter::open(root, step, w);
        ASSERT_TRUE(sw.ok());
        ASSERT_TRUE(sw.value()->add_tensor("x", dt, shape, off, cnt, data.data()).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    };
    shard(1, 0, {4}, {0}, {3});
    shard(1, 1, {4}, {2}, {2});
    auto c = commit(root, 2, meta_for(1, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("overlap"), std::string::npos) << c.error();

    shard(2, 0, {4}, {0}, {1});
    shard(2, 1, {4}, {2}, {2});
    c = commit(root, 2, meta_for(2, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("cover only 3 of 4"), std::string::npos) << c.error();

    shard(3, 0, {4}, {0}, {2});
    c = commit(root, 2, meta_for(3, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("shard-00001.h5 is missing"), std::string::npos) << c.error();

    shard(4, 0, {4}, {0}, {2});
    shard(4, 1, {4}, {2}, {2}, DType::int64);
    c = commit(root, 2, meta_for(4, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("tensor x is int64"), std::string::npos) << c.error();

    // None of this produced a complete checkpoint; all are listed incomplete.
    auto l = list(root);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l.value().size(), 4u);
    for (const auto &e : l.value()) EXPECT_FALSE(e.complete);
    EXPECT_FALSE(Reader::open_latest(root).ok());
}

// The other ways a commit can be asked wrongly, or find its directory not as the writers left
// it: each is refused with a message naming what is wrong, and nothing is committed; leftovers
// of an earlier failed commit or writer are cleared and the commit goes through.
TEST(Commit, RefusesBadRequestsAndForeignFilesNamingThem) {
    TempDir d;
    const std::string root = d / "root";
    const std::vector<float> data(8, 1.0f);
    auto shard = [&](std::uint64_t step, std::uint32_t w, std::uint32_t writers, const std::string &attempt = "0",
                     const std::string &base = "", Change change = Change::detect) {
        WriterOptions wo;
        wo.attempt = attempt;
        wo.base = base;
        auto sw = ShardWriter::open(root, step, w, wo);
        ASSERT_TRUE(sw.ok()) << sw.error();
        ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {2 * writers}, {2 * w}, {2}, data.data(), change).ok());
        RankState rs;
        rs.rank = w;
        ASSERT_TRUE(sw.value()->add_rank_state(rs).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    };
    auto refused = [&](std::uint32_t writers, const Meta &meta, const std::string &want,
                       const CommitOptions &o = {}) {
        auto c = commit(root, writers, meta, o);
        if (c.ok()) {
            ADD_FAILURE() << "committed " << c.value() << "; expected: " << want;
        } else {
            EXPECT_NE(c.error().find(want), std::string::npos) << c.error();
        }
    };
    shard(1, 0, 1);
    refused(0, meta_for(1, 1), "commit: writers 0: expected 1..1048576");
    refused(1, meta_for(1, kMaxWriters + 1), "commit: world size 1048577: expected 0..1048576");
    Meta long_layout = meta_for(1, 1);
    long_layout.unit_layout.assign(256, 'u');
    refused(1, long_layout, "commit: unit layout longer than 255 bytes");
    refused(1, meta_for(9, 1), ".step-0000000009.partial-0 does not exist; did every rank's ShardWriter::finish() succeed?");

    // Left over from a commit that failed after writing its index, and from a writer that died
    // before its rename: cleared, not part of the checkpoint.
    const std::string partial = root + "/.step-0000000001.partial-0";
    ASSERT_TRUE(fsio::write_file(partial + "/index.h5", "half an index").ok());
    ASSERT_TRUE(fsio::write_file(partial + "/shard-00000.h5.tmp-123", "half a shard").ok());
    // Something else is not.
    ASSERT_TRUE(fsio::write_file(partial + "/notes.txt", "mine").ok());
    refused(1, meta_for(1, 1), partial + "/notes.txt is not one of the 1 expected shard files");
    ASSERT_TRUE(fsio::remove_file(partial + "/notes.txt").ok());
    auto c1 = commit(root, 1, meta_for(1, 1));
    ASSERT_TRUE(c1.ok()) << c1.error();
    EXPECT_TRUE(verify(c1.value()).value().ok());
    EXPECT_FALSE(fsio::exists(c1.value() + "/shard-00000.h5.tmp-123"));

    // A second attempt at a step that is committed already.
    shard(1, 0, 1, "retry");
    CommitOptions retry;
    retry.attempt = "retry";
    refused(1, meta_for(1, 1), root + "/step-0000000001 already exists", retry);

    // A shard of another step copied in under this step's name.
    shard(2, 0, 2);
    shard(3, 0, 2);
    shard(3, 1, 2);
    ASSERT_TRUE(fsio::write_file(root + "/.step-0000000002.partial-0/shard-00001.h5",
                                 read_all_bytes(root + "/.step-0000000003.partial-0/shard-00001.h5")).ok());
    refused(2, meta_for(2, 2), "belongs to rank 1, step 3, attempt '0'; expected rank 1, step 2, attempt '0'");

    // Two writers adding the state of the same rank.
    {
        shard(4, 0, 2);
        auto sw = ShardWriter::open(root, 4, 1);
        ASSERT_TRUE(sw.ok());
        ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {4}, {2}, {2}, data.data()).ok());
        RankState rs;
        rs.rank = 0;
        ASSERT_TRUE(sw.value()->add_rank_state(rs).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
        refused(2, meta_for(4, 2), "commit: rank state of rank 0 was added by more than one writer");
    }

    // A base file removed (by hand, or by a careless gc) between the write and the commit.
    const std::string base = c1.value();
    shard(5, 0, 1, "0", base, Change::unchanged);
    ASSERT_TRUE(fsio::remove_file(base + "/shard-00000.h5").ok());
    refused(1, meta_for(5, 1), "tensor x: source file " + root + "/.step-0000000005.partial-0/../step-0000000001/shard-00000.h5 does not exist");

    auto l = list(root);
    ASSERT_TRUE(l.ok());
    for (const auto &e : l.value()) EXPECT_EQ(e.complete, e.path == c1.value()) << e.path;
}

TEST(Writer, ValidatesNamesSlicesAndAbandonsCleanly) {
    TempDir d;
    auto sw = ShardWriter::open(d / "root", 1, 0);
    ASSERT_TRUE(sw.ok());
    const float f[4] = {1, 2, 3, 4};
    for (const char *bad : {"", "/a", "a/", "a//b", "a/../b", "a b", "a\nb", "..", "a/./b"}) {
        auto st = sw.value()->add_tensor(bad, DType::fp32, {4}, {0}, {4}, f);
        EXPECT_FALSE(st.ok()) << "accepted '" << bad << "'";
    }
    EXPECT_FALSE(sw.value()->add_tensor("x", DType::fp32, {4}, {2}, {3}, f).ok());
    EXPECT_FALSE(sw.value()->add_tensor("x", DType::fp32, {0}, {0}, {0}, f).ok());
    EXPECT_FALSE(sw.value()->add_tensor("x", DType::fp32, {4, 4}, {0}, {4}, f).ok());
    ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {4}, {0}, {4}, f).ok());
    auto dup = sw.value()->add_tensor("x", DType::fp32, {4}, {0}, {4}, f);
    EXPECT_FALSE(dup.ok());
    EXPECT_NE(dup.error().find("added twice"), std::string::npos);
    EXPECT_FALSE(ShardWriter::open(d / "root", 1, 0, WriterOptions{"bad attempt", "", true}).ok());
    auto null_data = sw.value()->add_tensor("y", DType::fp32, {4}, {0}, {4}, nullptr);
    EXPECT_EQ(null_data.error(), "tensor y: data is null");
    EXPECT_TRUE(sw.value()->add_tensor("y", DType::fp32, {4}, {0}, {4}, f).ok());   // not taken by the failure
    RankState rs;
    rs.rank = kMaxWriters;
    EXPECT_EQ(sw.value()->add_rank_state(rs).error(), "rank state: rank 1048576 out of range");
    rs.rank = 3;
    EXPECT_TRUE(sw.value()->add_rank_state(rs).ok());
    EXPECT_EQ(sw.value()->add_rank_state(rs).error(), "rank state of rank 3 added twice");
    EXPECT_FALSE(ShardWriter::open(d / "root", 1, kMaxWriters).ok());
    sw.value().reset();   // abandoned: no temporary file may remain
    auto names = fsio::list_dir(d / "root/.step-0000000001.partial-0");
    ASSERT_TRUE(names.ok());
    EXPECT_TRUE(names.value().empty());
}

// abandon(): the files of an attempt that will not be committed go at once; a committed
// checkpoint of the same step, other attempts and `latest` stay; no directory is success.
TEST(Commit, AbandonRemovesOnlyThatAttemptsFiles) {
    TempDir d;
    const std::string root = d / "root";
    const float f[4] = {1, 2, 3, 4};
    for (const char *attempt : {"g1", "g2"}) {
        auto sw = ShardWriter::open(root, 7, 0, WriterOptions{attempt, "", true});
        ASSERT_TRUE(sw.ok()) << sw.error();
        ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {4}, {0}, {4}, f).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    }
    Meta m;
    m.step = 7;
    CommitOptions o;
    o.attempt = "g2";
    auto c = commit(root, 1, m, o);
    ASSERT_TRUE(c.ok()) << c.error();
    ASSERT_TRUE(fsio::exists(root + "/.step-0000000007.partial-g1"));
    EXPECT_TRUE(abandon(root, 7, "g1").ok());
    EXPECT_FALSE(fsio::exists(root + "/.step-0000000007.partial-g1"));
    EXPECT_TRUE(fsio::exists(c.value() + "/index.h5"));
    EXPECT_TRUE(abandon(root, 7, "g2").ok());   // committed: no partial directory left to remove
    EXPECT_TRUE(fsio::exists(c.value() + "/index.h5"));
    EXPECT_TRUE(abandon(root, 8, "g1").ok());
    auto bad = abandon(root, 7, "../x");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().find("abandon"), std::string::npos) << bad.error();
}

// Free text in the metadata (the unit layout, the scheduler's kind) is JSON-escaped in the
// index and read back as it was: quotes, backslashes and UTF-8.
TEST(Manifest, FreeTextRoundTripsThroughTheIndex) {
    TempDir d;
    const std::string root = d / "root";
    const float f[2] = {1, 2};
    auto sw = ShardWriter::open(root, 1, 0);
    ASSERT_TRUE(sw.ok());
    ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {2}, {0}, {2}, f).ok());
    ASSERT_TRUE(sw.value()->finish().ok());
    Meta m = meta_for(1, 1);
    m.unit_layout = "4@pcie \"a\" \\ b/c \xc3\xa9t\xc3\xa9";
    m.lr.kind = "cos\"ine";
    auto c = commit(root, 1, m);
    ASSERT_TRUE(c.ok()) << c.error();
    auto r = Reader::open(c.value());
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.value()->manifest().meta.unit_layout, m.unit_layout);
    EXPECT_EQ(r.value()->manifest().meta.lr.kind, m.lr.kind);
}

// An index of another format version is refused by name, not misread.
TEST(Manifest, AnotherFormatVersionIsRefused) {
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 1, 1, {{"x", DType::fp32, {4}, 1}});
    const std::string index = ck + "/index.h5";
    hid_t f = H5Fopen(index.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t a = H5Aopen(f, kVersionAttr, H5P_DEFAULT);
    ASSERT_GE(a, 0);
    const std::uint64_t two = 2;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_UINT64, &two), 0);
    H5Aclose(a);
    ASSERT_GE(H5Fclose(f), 0);
    auto r = Reader::open(ck);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), index + ": format version 2 is not supported; this omni-ckpt reads version 1");
    auto v = verify(ck);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.error(), r.error());
}

TEST(Manifest, ParserRejectsHostileInput) {
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 1, 2, {{"w", DType::fp32, {4}, 1}});
    auto m = Reader::open(ck).value()->manifest();
    const std::string good = manifest_to_json(m);
    ASSERT_TRUE(parse_manifest(good).ok());
    auto mutate = [&](const std::string &from, const std::string &to) {
        std::string s = good;
        const auto pos = s.find(from);
        EXPECT_NE(pos, std::string::npos) << from;
        return s.replace(pos, from.size(), to);
    };
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"\"format_version\":1", "\"format_version\":2"},
        {"\"file\":\"shard-00000.h5\"", "\"file\":\"../../etc/passwd\""},
        {"\"file\":\"shard-00000.h5\"", "\"file\":\"/abs/shard-00000.h5\""},
        {"\"writers\":2", "\"writers\":1"},
        {"\"shape\":[4]", "\"shape\":[5]"},
        {"\"shape\":[4]", "\"shape\":[0]"},
        {"\"dtype\":\"fp32\"", "\"dtype\":\"fp64\""},
        {"\"name\":\"w\"", "\"name\":\"../w\""},
        {"\"dataset\":\"/t/w\"", "\"dataset\":\"/t/x\""},
        {"\"offset\":[0]", "\"offset\":[-1]"},
    };
    for (const auto &[from, to] : cases) {
        auto r = parse_manifest(mutate(from, to));
        EXPECT_FALSE(r.ok()) << "accepted " << to;
    }
    EXPECT_FALSE(parse_manifest("").ok());
    EXPECT_FALSE(parse_manifest("[]").ok());
    EXPECT_FALSE(parse_manifest(std::string(100000, '[')).ok());
    EXPECT_NE(parse_manifest(mutate("\"format_version\":1", "\"format_version\":2")).error().find("version 2"),
              std::string::npos);
}

// The streaming parser (manifest_parse.cc): keys it does not know are skipped with whatever
// they hold, a known key given twice is refused, and each problem is reported where it is.
TEST(Manifest, ParserSkipsUnknownKeysRefusesRepeatedOnesAndSaysWhere) {
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 1, 2, {{"w", DType::fp32, {4}, 1}, {"b", DType::int64, {3, 2}, 2}});
    const Manifest m = Reader::open(ck).value()->manifest();
    const std::string good = manifest_to_json(m);
    auto insert_after = [&](const std::string &s, const std::string &at, const std::string &what) {
        const auto pos = s.find(at);
        EXPECT_NE(pos, std::string::npos) << at;
        return pos == std::string::npos ? s : s.substr(0, pos + at.size()) + what + s.substr(pos + at.size());
    };
    // Unknown keys at every level, holding scalars, objects and arrays nested deeply.
    const std::string deep = std::string(5000, '[') + "{\"step\":\"not this one\"}" + std::string(5000, ']');
    std::string extra = insert_after(good, "{", "\"future\":{\"a\":[1,{\"b\":null,\"step\":-1}],\"c\":\"x\"},\"deep\":" + deep + ",");
    extra = insert_after(extra, "\"sources\":[{", "\"hint\":[true,false,1.5],");
    extra = insert_after(extra, "\"lr_scheduler\":{", "\"note\":\"warm\",");
    auto parsed = parse_manifest(extra);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(manifest_to_json(parsed.value()), good);

    auto error_of = [](const omni::Result<Manifest> &r) { return r.ok() ? std::string("accepted") : r.error(); };
    EXPECT_EQ(error_of(parse_manifest(insert_after(good, "{", "\"step\":5,"))), "manifest: 'step': given twice");
    EXPECT_EQ(error_of(parse_manifest(insert_after(good, "\"sources\":[{", "\"file\":\"shard-00000.h5\","))),
              "manifest.tensors[0].sources[0]: 'file': given twice");
    std::string bad_offset = good;   // the offset of the second slice of the first tensor
    const auto off = bad_offset.find("\"offset\":[", bad_offset.find("\"offset\":[") + 1);
    ASSERT_NE(off, std::string::npos);
    bad_offset.insert(off + 10, "\"x\",");
    EXPECT_EQ(error_of(parse_manifest(bad_offset)), "manifest.tensors[0].sources[1]: 'offset': expected unsigned integers");
    std::string nine = good;
    nine.replace(nine.find("\"shape\":["), 9, "\"shape\":[1,1,1,1,1,1,1,1,");
    EXPECT_EQ(error_of(parse_manifest(nine)), "manifest.tensors[0]: 'shape': expected an array of 1..8 unsigned integers");
    std::string lr_array = good;
    lr_array.replace(lr_array.find("\"lr_scheduler\":{"), 16, "\"lr_scheduler\":[],\"x\":{");
    EXPECT_EQ(error_of(parse_manifest(lr_array)), "manifest.lr_scheduler: expected a JSON object");
    // data_offset may be left out (the slice is then read through HDF5), and is checked
    // when given.
    const auto place = good.find("\"data_offset\":");
    ASSERT_NE(place, std::string::npos);
    const auto place_end = good.find(',', place);
    std::string unplaced = good;
    unplaced.erase(place, place_end + 1 - place);
    auto without = parse_manifest(unplaced);
    ASSERT_TRUE(without.ok()) << without.error();
    EXPECT_EQ(without.value().tensors[0].sources[0].data_offset, 0u);
    EXPECT_NE(m.tensors[0].sources[0].data_offset, 0u);
    std::string text_place = good;
    text_place.replace(place, place_end - place, "\"data_offset\":\"64\"");
    EXPECT_EQ(error_of(parse_manifest(text_place)),
              "manifest.tensors[0].sources[0]: 'data_offset': expected an unsigned integer");
    std::string far_place = good;
    far_place.replace(place, place_end - place, "\"data_offset\":9223372036854775808");
    EXPECT_EQ(error_of(parse_manifest(far_place)),
              "manifest.tensors[0].sources[0]: 'data_offset': exceeds 4611686018427387904");
    std::string no_writer = good;
    no_writer.erase(no_writer.find("\"writer\":0,"), 11);
    EXPECT_EQ(error_of(parse_manifest(no_writer)), "manifest.tensors[0].sources[0]: missing key 'writer'");

    // A truncated manifest is not JSON, whatever its start looks like; a manifest of another
    // format version says so, even when the rest of it is not this version's.
    EXPECT_EQ(error_of(parse_manifest(good.substr(0, good.size() / 2))), "manifest: not valid JSON");
    EXPECT_EQ(error_of(parse_manifest(insert_after(good, "{", "\"step\":5,").substr(0, good.size() / 2))),
              "manifest: not valid JSON");
    std::string v2 = good;
    v2.replace(v2.find("\"format_version\":1"), 18, "\"format_version\":2");
    v2.replace(v2.find("\"tensors\":["), 11, "\"tensors\":\"elsewhere\",\"t\":[");
    EXPECT_NE(error_of(parse_manifest(v2)).find("format version 2 is not supported"), std::string::npos)
        << error_of(parse_manifest(v2));

    // The same parser reads a shard's manifest.
    ShardManifest s;
    s.step = 3;
    s.rank = 1;
    s.attempt = "0";
    s.tensors = {m.tensors[0]};
    s.tensors[0].sources = {m.tensors[0].sources[1]};
    const std::string shard = shard_manifest_to_json(s);
    auto sp = parse_shard_manifest(insert_after(shard, "{", "\"later\":[{}],"));
    ASSERT_TRUE(sp.ok()) << sp.error();
    EXPECT_EQ(shard_manifest_to_json(sp.value()), shard);
    auto twice = parse_shard_manifest(insert_after(shard, "{", "\"rank\":1,"));
    ASSERT_FALSE(twice.ok());
    EXPECT_EQ(twice.error(), "shard manifest: 'rank': given twice");
}

namespace {

// A partial checkpoint of step `step` with two ranks: rank 0 writes all of tensor "x", rank 1
// no slice, only its rank state (so it finishes with shard-00001.ref). Returns that state.
RankState two_ranks_one_without_data(const std::string &root, std::uint64_t step) {
    const std::vector<float> data(4, 2.5f);
    RankState rs;
    rs.rank = 1;
    rs.rng = {7, 0, 255, 1};
    for (std::int64_t i = 0; i < 1000; ++i) rs.consumed.push_back(i * 3 - 5);   // negatives too
    for (std::uint32_t w = 0; w < 2; ++w) {
        auto sw = ShardWriter::open(root, step, w);
        EXPECT_TRUE(sw.ok()) << sw.error();
        if (!sw.ok()) return rs;
        if (w == 0) EXPECT_TRUE(sw.value()->add_tensor("x", DType::fp32, {4}, {0}, {4}, data.data()).ok());
        else EXPECT_TRUE(sw.value()->add_rank_state(rs).ok());
        auto st = sw.value()->finish();
        EXPECT_TRUE(st.ok()) << st.error();
    }
    return rs;
}

}  // namespace

// The rank states of a reference shard reach the index, whether commit takes them from the
// writer of this process or, once the file has changed identity, reads them from the file.
TEST(RefShard, RankStatesReachTheIndexFromMemoryAndFromTheFile) {
    TempDir d;
    const std::string root = d / "root";
    for (std::uint64_t step : {1, 2}) {
        const RankState want = two_ranks_one_without_data(root, step);
        const std::string ref = root + "/" + partial_dir_name(step, "0") + "/shard-00001.ref";
        ASSERT_TRUE(fsio::exists(ref));
        ASSERT_FALSE(fsio::exists(root + "/" + partial_dir_name(step, "0") + "/shard-00001.h5"));
        if (step == 2) {
            // Same bytes, new identity (another inode): commit must read and check the file.
            const std::string bytes = read_all_bytes(ref);
            ASSERT_TRUE(fsio::remove_file(ref).ok());
            ASSERT_TRUE(fsio::write_file(ref, bytes).ok());
        }
        auto c = commit(root, 2, meta_for(step, 2));
        ASSERT_TRUE(c.ok()) << c.error();
        auto r = Reader::open(c.value());
        ASSERT_TRUE(r.ok()) << r.error();
        auto got = r.value()->rank_state(1);
        ASSERT_TRUE(got.ok()) << got.error();
        EXPECT_EQ(got.value().rng, want.rng) << "step " << step;
        EXPECT_EQ(got.value().consumed, want.consumed) << "step " << step;
    }
}

// The same for an HDF5 shard: its rank states reach the index from the writer of this
// process, or from the file once it has changed identity, where a damaged state is refused
// with the file named.
TEST(Commit, RankStatesOfHdf5ShardsFromMemoryAndFromTheFile) {
    TempDir d;
    const std::string root = d / "root";
    RankState want;
    want.rank = 0;
    want.rng = {1, 2, 3, 250};
    for (std::int64_t i = 0; i < 300; ++i) want.consumed.push_back(7 * i - 11);
    auto write = [&](std::uint64_t step) {
        const std::vector<float> data(6, 0.5f);
        auto sw = ShardWriter::open(root, step, 0);
        ASSERT_TRUE(sw.ok()) << sw.error();
        ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {6}, {0}, {6}, data.data()).ok());
        ASSERT_TRUE(sw.value()->add_rank_state(want).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    };
    auto shard = [&](std::uint64_t step) { return root + "/" + partial_dir_name(step, "0") + "/shard-00000.h5"; };
    auto renew = [&](const std::string &path) {   // same bytes, another inode
        const std::string bytes = read_all_bytes(path);
        ASSERT_TRUE(fsio::remove_file(path).ok());
        ASSERT_TRUE(fsio::write_file(path, bytes).ok());
    };
    for (std::uint64_t step : {1, 2}) {
        write(step);
        if (step == 2) renew(shard(step));
        auto c = commit(root, 1, meta_for(step, 1));
        ASSERT_TRUE(c.ok()) << c.error();
        auto got = Reader::open(c.value()).value()->rank_state(0);
        ASSERT_TRUE(got.ok()) << got.error();
        EXPECT_EQ(got.value().rng, want.rng) << "step " << step;
        EXPECT_EQ(got.value().consumed, want.consumed) << "step " << step;
    }
    // One consumed index changed in the file: the commit reads it and refuses it.
    write(3);
    {
        hid_t f = H5Fopen(shard(3).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        ASSERT_GE(f, 0);
        hid_t ds = H5Dopen2(f, "/state/rank-00000/consumed", H5P_DEFAULT);
        ASSERT_GE(ds, 0);
        std::vector<std::int64_t> v(want.consumed);
        v[42] += 1;
        EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
        H5Dclose(ds);
        H5Fclose(f);
    }
    renew(shard(3));
    auto c = commit(root, 1, meta_for(3, 1));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("shard-00000.h5: rank state of rank 0: checksum mismatch"), std::string::npos) << c.error();
}

// A damaged reference shard, or a rank that left both kinds of shard, fails the commit with
// the file named; putting the right file back lets the same commit succeed (nothing lost).
TEST(RefShard, CommitRefusesDamagedAndDuplicateShards) {
    TempDir d;
    const std::string root = d / "root";
    (void)two_ranks_one_without_data(root, 1);
    const std::string dir = root + "/" + partial_dir_name(1, "0");
    const std::string ref = dir + "/shard-00001.ref";
    const std::string good = read_all_bytes(ref);
    ASSERT_GT(good.size(), 100u);
    auto commit_with = [&](const std::string &bytes) {
        EXPECT_TRUE(fsio::remove_file(ref).ok());
        EXPECT_TRUE(fsio::write_file(ref, bytes).ok());
        auto c = commit(root, 2, meta_for(1, 2));
        return c.ok() ? std::string() : c.error();
    };
    std::string flipped = good;
    flipped[40] ^= 0x20;   // inside the manifest
    std::string e = commit_with(flipped);
    EXPECT_NE(e.find("shard-00001.ref"), std::string::npos) << e;
    EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
    e = commit_with(good.substr(0, good.size() - 9));
    EXPECT_NE(e.find("shard-00001.ref: lengths do not match"), std::string::npos) << e;
    e = commit_with("");
    EXPECT_NE(e.find("not a reference shard"), std::string::npos) << e;

    // A rank state whose bytes are not what its manifest entry says: a consistent file
    // (trailer right) with one consumed index changed.
    auto parsed = parse_ref_shard(good);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    ShardRecord bad = parsed.value();
    bad.states[0].consumed[10] += 1;
    e = commit_with(encode_ref_shard(bad.manifest, bad.states));
    EXPECT_NE(e.find("shard-00001.ref: rank state of rank 1: checksum mismatch"), std::string::npos) << e;

    // Rank 1 also left an HDF5 shard (a writer run twice).
    {
        const std::vector<float> one(1, 1.0f);
        auto sw = ShardWriter::open(root, 1, 1);
        ASSERT_TRUE(sw.ok());
        ASSERT_TRUE(fsio::rename_path(ref, ref + ".keep").ok());   // the writer would replace it
        ASSERT_TRUE(sw.value()->add_tensor("y", DType::fp32, {1}, {0}, {1}, one.data()).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
        ASSERT_TRUE(fsio::rename_path(ref + ".keep", ref).ok());
    }
    e = commit_with(good);
    EXPECT_NE(e.find("shard-00001.ref both exist; rank 1 finished twice"), std::string::npos) << e;
    ASSERT_TRUE(fsio::remove_file(dir + "/shard-00001.h5").ok());
    EXPECT_EQ(commit_with(good), "");
    EXPECT_TRUE(Reader::open_latest(root).ok());
}

TEST(RefShard, ParserRejectsHostileInput) {
    ShardManifest m;
    m.step = 9;
    m.rank = 3;
    m.attempt = "g1";
    RankState a, b;
    a.rank = 3;
    a.rng = {1, 2, 3};
    a.consumed = {-1, 0, std::numeric_limits<std::int64_t>::max()};
    b.rank = 4;   // a writer may carry other ranks' states
    b.consumed = {5};
    for (const RankState *s : {&a, &b}) {
        RankStateInfo info;
        info.rank = s->rank;
        info.rng_bytes = s->rng.size();
        info.consumed = s->consumed.size();
        m.rank_states.push_back(info);
    }
    const std::string good = encode_ref_shard(m, {a, b});
    auto p = parse_ref_shard(good);
    ASSERT_TRUE(p.ok()) << p.error();
    ASSERT_EQ(p.value().states.size(), 2u);
    EXPECT_EQ(p.value().manifest.rank, 3u);
    EXPECT_EQ(p.value().states[0].rng, a.rng);
    EXPECT_EQ(p.value().states[0].consumed, a.consumed);
    EXPECT_EQ(p.value().states[1].consumed, b.consumed);
    // Every truncation, and every single-byte change, is refused.
    for (std::size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(parse_ref_shard(good.substr(0, n)).ok()) << n;
    for (std::size_t i = 0; i < good.size(); ++i) {
        std::string s = good;
        s[i] ^= 0x01;
        EXPECT_FALSE(parse_ref_shard(s).ok()) << "byte " << i;
    }
    // Consistent files (trailer recomputed) whose contents lie.
    auto resealed = [](std::string s) {
        s.resize(s.size() - 8);
        const std::uint64_t h = xxh3(s.data(), s.size());
        for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
        return s;
    };
    auto put = [](std::string s, std::size_t at, std::uint64_t v) {
        for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
        return s;
    };
    auto e = parse_ref_shard(resealed(put(good, 8, 2)));
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().find("format version 2"), std::string::npos) << e.error();
    e = parse_ref_shard(resealed(put(good, 16, std::uint64_t(1) << 62)));   // manifest length
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().find("lengths do not match"), std::string::npos) << e.error();
    ShardManifest more = m;
    more.rank_states[1].consumed = 2;   // says 16 bytes; 8 are stored
    e = parse_ref_shard(encode_ref_shard(more, {a, b}));
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().find("do not add up"), std::string::npos) << e.error();
    more.rank_states[1].consumed = std::uint64_t(1) << 61;   // 8 * this overflows
    EXPECT_FALSE(parse_ref_shard(encode_ref_shard(more, {a, b})).ok());
    // Names.
    EXPECT_EQ(ref_shard_file_name(3), "shard-00003.ref");
    EXPECT_TRUE(is_ref_shard_file_name("shard-1234567.ref"));
    for (const char *bad_name : {"shard-0003.ref", "shard-12345678.ref", "shard-00003.h5", "shard-0000a.ref",
                                 "shard-00003.ref.tmp"})
        EXPECT_FALSE(is_ref_shard_file_name(bad_name)) << bad_name;
}

// What a process remembers of the shards it wrote is bounded in entries and bytes, oldest
// forgotten first, so a rank whose commits run elsewhere does not grow with the job.
TEST(BoundedMap, ForgetsOldestBeyondEntriesOrBytes) {
    BoundedMap<int, std::string> m(3, 100);
    m.put(1, "a", 10);
    m.put(2, "b", 10);
    m.put(3, "c", 10);
    m.put(4, "d", 10);   // four entries: 1 goes
    EXPECT_EQ(m.find(1), nullptr);
    ASSERT_NE(m.find(2), nullptr);
    EXPECT_EQ(*m.find(2), "b");
    EXPECT_EQ(m.size(), 3u);
    EXPECT_EQ(m.bytes(), 30u);
    m.put(2, "B", 10);   // replaced: now the newest
    m.put(5, "e", 75);   // 105 bytes: the oldest (3) goes, then 95 remain with 4, 2, 5
    EXPECT_EQ(m.find(3), nullptr);
    ASSERT_NE(m.find(2), nullptr);
    EXPECT_EQ(*m.find(2), "B");
    EXPECT_EQ(m.bytes(), 95u);
    auto t = m.take(4);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(*t, "d");
    EXPECT_FALSE(m.take(4).has_value());
    EXPECT_EQ(m.bytes(), 85u);
    m.put(6, "huge", 101);   // larger than the budget: everything goes, itself included
    EXPECT_EQ(m.size(), 0u);
    EXPECT_EQ(m.bytes(), 0u);
    // Entries taken or replaced leave nothing behind: many rounds stay within bounds.
    for (int i = 0; i < 10000; ++i) {
        m.put(i % 7, std::to_string(i), 1);
        if (i % 3 == 0) (void)m.take((i + 1) % 7);
    }
    EXPECT_LE(m.size(), 3u);
    EXPECT_EQ(m.bytes(), m.size());
}

TEST(Hash, DispatchAndStreamingEqualPlainXxh3) {
    // The format fixes XXH3-64 of the bytes: whatever code path computes it must agree.
    std::vector<char> buf(5 << 20);
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 131 + (i >> 9));
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(240), std::size_t(4097), buf.size()}) {
        EXPECT_EQ(xxh3(buf.data(), n), XXH3_64bits(buf.data(), n)) << n;
        Hasher h;
        for (std::size_t off = 0; off < n; off += 1000003) h.update(buf.data() + off, std::min<std::size_t>(1000003, n - off));
        EXPECT_EQ(h.digest(), XXH3_64bits(buf.data(), n)) << n;
    }
}

TEST(Format, Names) {
    EXPECT_EQ(step_dir_name(100), "step-0000000100");
    EXPECT_EQ(parse_step_dir_name("step-0000000100").value(), 100u);
    EXPECT_FALSE(parse_step_dir_name("step-1").has_value());
    EXPECT_FALSE(parse_step_dir_name("step-00000001x0").has_value());
    EXPECT_EQ(parse_partial_dir_name(".step-0000000100.partial-g3").value(), 100u);
    EXPECT_FALSE(parse_partial_dir_name(".step-0000000100.partial-").has_value());
    EXPECT_EQ(rebase_file_ref("shard-00001.h5", "step-0000000090"), "../step-0000000090/shard-00001.h5");
    EXPECT_EQ(rebase_file_ref("../step-0000000080/shard-00001.h5", "step-0000000090"),
              "../step-0000000080/shard-00001.h5");
    EXPECT_TRUE(check_file_ref("../merged-a/shard-1234567.h5").ok());
    EXPECT_FALSE(check_file_ref("../../x/shard-00001.h5").ok());
    EXPECT_FALSE(check_file_ref("../.hidden/shard-00001.h5").ok());
}

// What a writer is given is checked at the call, before the name is taken, and a refused
// slice leaves the writer usable: a byte size that does not fit (2^62 fp32 elements would be
// 2^64 bytes, wrapping to 0), a value that is not a DType, a tensor name on the path of
// another ("x" and "x/y": HDF5 would need "x" as a dataset and a group). Until these were
// checked, HDF5 refused them deep in the writer, which then failed for good; the asynchronous
// writer reported them only at wait().
namespace {
void expect_refused(const omni::Status &st, const std::string &start, const std::string &has) {
    ASSERT_FALSE(st.ok()) << "accepted; expected '" << start << "...'";
    EXPECT_EQ(st.error().rfind(start, 0), 0u) << st.error();
    EXPECT_NE(st.error().find(has), std::string::npos) << st.error();
}
}  // namespace

TEST(WriterValidation, SizeOverflowAndBadDtypeRefusedByNameWriterGoesOn) {
    TempDir d;
    const float f[4] = {1, 2, 3, 4};
    const std::uint64_t e62 = std::uint64_t(1) << 62, e61 = std::uint64_t(1) << 61;
    auto sw = ShardWriter::open(d / "root", 1, 0);
    ASSERT_TRUE(sw.ok());
    ShardWriter &w = *sw.value();
    expect_refused(w.add_tensor("big", DType::fp32, {e62}, {0}, {e62}, f), "tensor big: ", "2^62 bytes");
    expect_refused(w.add_tensor("big", DType::int64, {e61}, {0}, {e61}, f), "tensor big: ", "2^62 bytes");
    expect_refused(w.add_tensor("big", DType::fp32, {e62}, {0}, {4}, f), "tensor big: shape", "2^62 bytes");
    expect_refused(w.add_tensor("big", DType::bf16, {2, e61}, {0, 0}, {1, e61}, f), "tensor big: ", "2^62 bytes");
    expect_refused(w.add_tensor("bad", static_cast<DType>(9), {4}, {0}, {4}, f), "tensor bad: dtype 9", "fp32");
    ASSERT_TRUE(w.add_tensor("big", DType::fp32, {4}, {0}, {4}, f).ok());   // names not taken,
    auto st = w.add_tensor("bad", DType::fp32, {4}, {0}, {4}, f);            // writer not failed
    ASSERT_TRUE(st.ok()) << st.error();
    RankState rs;
    rs.rank = 0;
    ASSERT_TRUE(w.add_rank_state(rs).ok());
    st = w.finish();
    ASSERT_TRUE(st.ok()) << st.error();
    auto c = commit(d / "root", 1, meta_for(1, 1));
    ASSERT_TRUE(c.ok()) << c.error();
    auto r = Reader::open(c.value());
    ASSERT_TRUE(r.ok()) << r.error();
    float out[4] = {};
    ASSERT_TRUE(r.value()->read_all("bad", out, sizeof out).ok());
    EXPECT_EQ(out[3], 4.0f);
}

TEST(WriterValidation, AsyncRefusesOverflowBadDtypeAndRankAtTheCall) {
    TempDir d;
    const float f[4] = {1, 2, 3, 4};
    const std::uint64_t e62 = std::uint64_t(1) << 62;
    for (Snapshot mode : {Snapshot::copy, Snapshot::copy_on_write}) {
        const std::uint64_t step = mode == Snapshot::copy ? 1 : 2;
        AsyncShardWriter a(mode);
        ASSERT_TRUE(a.begin(d / "root", step, 0).ok());
        expect_refused(a.add_tensor("big", DType::fp32, {e62}, {0}, {e62}, f), "tensor big: ", "2^62 bytes");
        expect_refused(a.add_tensor("big", DType::fp32, {e62}, {0}, {4}, f), "tensor big: shape", "2^62 bytes");
        expect_refused(a.add_tensor("bad", static_cast<DType>(9), {4}, {0}, {4}, f), "tensor bad: dtype 9", "fp32");
        RankState rs;
        rs.rank = 0xffffffffu;
        EXPECT_EQ(a.add_rank_state(rs).error(), "rank state: rank 4294967295 out of range");
        rs.rank = kMaxWriters;
        EXPECT_EQ(a.add_rank_state(rs).error(), "rank state: rank 1048576 out of range");
        rs.rank = 0;
        ASSERT_TRUE(a.add_rank_state(rs).ok());
        EXPECT_EQ(a.add_rank_state(rs).error(), "rank state of rank 0 added twice");
        ASSERT_TRUE(a.add_tensor("big", DType::fp32, {4}, {0}, {4}, f).ok());
        ASSERT_TRUE(a.add_tensor("bad", DType::fp32, {4}, {0}, {4}, f).ok());
        ASSERT_TRUE(a.submit().ok());
        auto st = a.wait();
        ASSERT_TRUE(st.ok()) << st.error();
        auto c = commit(d / "root", 1, meta_for(step, 1));
        ASSERT_TRUE(c.ok()) << c.error();
    }
}

TEST(WriterValidation, NameOnThePathOfAnotherRefusedBothOrdersWriterGoesOn) {
    TempDir d;
    const float f[4] = {1, 2, 3, 4};
    auto sw = ShardWriter::open(d / "root", 1, 0);
    ASSERT_TRUE(sw.ok());
    ShardWriter &w = *sw.value();
    ASSERT_TRUE(w.add_tensor("x", DType::fp32, {4}, {0}, {4}, f).ok());
    expect_refused(w.add_tensor("x/y", DType::fp32, {4}, {0}, {4}, f), "tensor x/y: conflicts with tensor x ", "prefix");
    expect_refused(w.add_tensor("x/y/z", DType::fp32, {4}, {0}, {4}, f), "tensor x/y/z: conflicts with tensor x ", "rank 0");
    ASSERT_TRUE(w.add_tensor("a/b/c", DType::fp32, {4}, {0}, {4}, f).ok());
    expect_refused(w.add_tensor("a/b", DType::fp32, {4}, {0}, {4}, f), "tensor a/b: conflicts with tensor a/b/c ", "prefix");
    expect_refused(w.add_tensor("a", DType::fp32, {4}, {0}, {4}, f), "tensor a: conflicts with tensor a/b/c ", "prefix");
    // Not on each other's path.
    for (const char *ok : {"x.y", "xy", "x_/y", "a/bc", "a/b.c", "a/b/cd", "a/c"}) {
        auto st = w.add_tensor(ok, DType::fp32, {4}, {0}, {4}, f);
        EXPECT_TRUE(st.ok()) << ok << ": " << st.error();
    }
    ASSERT_TRUE(w.finish().ok());
    auto c = commit(d / "root", 1, meta_for(1, 1));
    ASSERT_TRUE(c.ok()) << c.error();
    auto r = Reader::open(c.value());
    ASSERT_TRUE(r.ok()) << r.error();
    float out[4] = {};
    for (const char *name : {"x", "a/b/c", "a/b/cd", "x_/y"}) {
        ASSERT_TRUE(r.value()->read_all(name, out, sizeof out).ok()) << name;
        EXPECT_EQ(out[2], 3.0f);
    }
}

TEST(WriterValidation, AsyncRefusesDuplicateAndPathConflictAtTheCall) {
    TempDir d;
    const float f[4] = {1, 2, 3, 4};
    AsyncShardWriter a;
    for (std::uint64_t step : {1, 2}) {   // names are per checkpoint
        ASSERT_TRUE(a.begin(d / "root", step, 0).ok());
        ASSERT_TRUE(a.add_tensor("x", DType::fp32, {4}, {0}, {4}, f).ok());
        expect_refused(a.add_tensor("x", DType::fp32, {4}, {0}, {4}, f), "tensor x: added twice", "rank 0");
        expect_refused(a.add_tensor("x/y", DType::fp32, {4}, {0}, {4}, f), "tensor x/y: conflicts with tensor x ", "prefix");
        ASSERT_TRUE(a.add_tensor("p/q", DType::fp32, {4}, {0}, {4}, f).ok());
        expect_refused(a.add_tensor("p", DType::fp32, {4}, {0}, {4}, f), "tensor p: conflicts with tensor p/q ", "prefix");
        expect_refused(a.add_tensor("y", DType::fp32, {4}, {0}, {4}, nullptr), "tensor y: data is null", "");
        ASSERT_TRUE(a.add_tensor("y", DType::fp32, {4}, {0}, {4}, f).ok());   // not taken by the failure
        ASSERT_TRUE(a.submit().ok());
        auto st = a.wait();
        ASSERT_TRUE(st.ok()) << st.error();
        auto c = commit(d / "root", 1, meta_for(step, 1));
        ASSERT_TRUE(c.ok()) << c.error();
    }
}

// Each rank's names are fine on their own; together "p" and "p/q" cannot be in one index.
// Commit refuses them before it makes any file, naming both tensors and their shards; the
// committed checkpoints stay as they were.
TEST(WriterValidation, CommitRefusesNamesOnEachOthersPathAcrossShards) {
    TempDir d;
    const std::string root = d / "root";
    const std::vector<Spec> specs = {{"w", DType::fp32, {8}, 5}};
    const std::string first = write_ckpt(root, 1, 2, specs);
    ASSERT_FALSE(first.empty());
    const float f[4] = {1, 2, 3, 4};
    for (std::uint32_t rank : {0u, 1u}) {
        auto sw = ShardWriter::open(root, 2, rank);
        ASSERT_TRUE(sw.ok());
        ASSERT_TRUE(sw.value()->add_tensor(rank == 0 ? "p" : "p/q", DType::fp32, {4}, {0}, {4}, f).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    }
    auto c = commit(root, 2, meta_for(2, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().rfind("commit: tensor p/q in ", 0), 0u) << c.error();
    EXPECT_NE(c.error().find("shard-00001.h5 conflicts with tensor p in "), std::string::npos) << c.error();
    EXPECT_NE(c.error().find("shard-00000.h5"), std::string::npos) << c.error();
    EXPECT_FALSE(fsio::exists(root + "/step-0000000002"));
    EXPECT_FALSE(fsio::exists(root + "/.step-0000000002.partial-0/index.h5"));
    auto r = Reader::open_latest(root);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.value()->path(), first);
    expect_logical(*r.value(), specs[0]);
    EXPECT_TRUE(verify(first).value().ok());
}
