// The checkpoint root as ls, gc, the commit's `latest` link, open_latest, merge and reshard
// see it: a committed checkpoint whose index cannot be read is never taken for an incomplete
// one, `latest` never moves to a lower step, and a rewrite's output is never put where gc
// would remove it.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/fsio.h"
#include "ckpt/index.h"
#include "omni/ckpt_cpp.h"
#include "test_util.h"

using namespace omni::ckpt;
using omni::ckpt::test::TempDir;
namespace stdfs = std::filesystem;

namespace {

Meta meta_of(std::uint64_t step) {
    Meta m;
    m.step = step;
    m.generation = 1;
    m.world_size = 1;
    return m;
}

// One writer, one tensor "x" of 64 floats valued `value`; incremental on `base` if given
// (with an unchanged value, every slice then references the base's file).
std::string write_step(const std::string &root, std::uint64_t step, float value = 1.0f,
                       const std::string &base = "") {
    WriterOptions wo;
    wo.base = base;
    auto sw = ShardWriter::open(root, step, 0, wo);
    EXPECT_TRUE(sw.ok()) << sw.error();
    if (!sw.ok()) return "";
    const std::vector<float> x(64, value);
    auto st = sw.value()->add_tensor("x", DType::fp32, {64}, {0}, {64}, x.data());
    EXPECT_TRUE(st.ok()) << st.error();
    st = sw.value()->finish();
    EXPECT_TRUE(st.ok()) << st.error();
    auto c = commit(root, 1, meta_of(step));
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? c.value() : "";
}

std::string latest_target(const std::string &root) {
    std::error_code ec;
    return stdfs::read_symlink(root + "/latest", ec).string();
}

// Every path under `dir`, relative to it.
std::set<std::string> tree(const std::string &dir) {
    std::set<std::string> out;
    for (const auto &p : stdfs::recursive_directory_iterator(dir))
        out.insert(stdfs::relative(p.path(), dir).string());
    return out;
}

// Holds an exclusive flock(2) on a file, as HDF5 does for a process that has it open for
// writing (h5py.File(path, "r+")): HDF5 then refuses to open it in another process, or through
// another descriptor in this one, until the lock is released.
class HeldLock {
public:
    explicit HeldLock(const std::string &path) : fd_(::open(path.c_str(), O_RDWR | O_CLOEXEC)) {
        locked_ = fd_ >= 0 && ::flock(fd_, LOCK_EX | LOCK_NB) == 0;
    }
    ~HeldLock() {
        if (fd_ >= 0) ::close(fd_);
    }
    bool locked() const { return locked_; }

private:
    int fd_;
    bool locked_ = false;
};

void make_old(const std::string &path) {
    const struct timeval old[2] = {{1000000000, 0}, {1000000000, 0}};
    ::utimes(path.c_str(), old);
}

const CheckpointEntry *find(const std::vector<CheckpointEntry> &es, const std::string &name) {
    for (const auto &e : es)
        if (e.name == name) return &e;
    return nullptr;
}

}  // namespace

// ---- defect: an index that exists but cannot be read was listed as incomplete ------------

TEST(CatalogUnreadable, ListsAnIndexThatCannotBeReadAsCommittedAndUnreadable) {
    TempDir d;
    const std::string root = d / "root";
    write_step(root, 1);
    const std::string s2 = write_step(root, 2);
    const std::string s3 = write_step(root, 3);
    ASSERT_TRUE(fsio::write_file(s2 + "/index.h5", "not an HDF5 file").ok());   // damaged, or EIO
    HeldLock lock(s3 + "/index.h5");
    ASSERT_TRUE(lock.locked());
    ASSERT_TRUE(fsio::make_dir(root + "/step-0000000004").ok());   // no index.h5: retired (incomplete)

    auto l = list(root);
    ASSERT_TRUE(l.ok()) << l.error();
    const CheckpointEntry *e1 = find(l.value(), "step-0000000001");
    const CheckpointEntry *e2 = find(l.value(), "step-0000000002");
    const CheckpointEntry *e3 = find(l.value(), "step-0000000003");
    const CheckpointEntry *e4 = find(l.value(), "step-0000000004");
    ASSERT_TRUE(e1 && e2 && e3 && e4);
    EXPECT_TRUE(e1->complete && !e1->unreadable) << e1->problem;
    for (const CheckpointEntry *e : {e2, e3}) {
        EXPECT_TRUE(e->complete) << e->name;
        EXPECT_TRUE(e->unreadable) << e->name;
        EXPECT_EQ(e->problem.rfind("unreadable: ", 0), 0u) << e->problem;
        EXPECT_NE(e->problem.find(e->path + "/index.h5"), std::string::npos) << e->problem;
    }
    EXPECT_TRUE(e3->latest);   // what open_latest tries: the newest committed step
    EXPECT_FALSE(e4->complete);
    EXPECT_FALSE(e4->unreadable);
}

TEST(CatalogUnreadable, GcRemovesOnlyOldPartialsWhileAnIndexIsUnreadable) {
    TempDir d;
    const std::string root = d / "root";
    const std::string s1 = write_step(root, 1);
    write_step(root, 2, 1.0f, s1);   // references step-1's shard
    const std::string s3 = write_step(root, 3, 2.0f);
    const std::string old_partial = root + "/.step-0000000004.partial-a";
    const std::string young_partial = root + "/.step-0000000004.partial-b";
    ASSERT_TRUE(fsio::make_dirs(old_partial).ok());
    ASSERT_TRUE(fsio::write_file(old_partial + "/shard-00000.h5.tmp", "x").ok());
    make_old(old_partial + "/shard-00000.h5.tmp");
    make_old(old_partial);
    ASSERT_TRUE(fsio::make_dirs(young_partial).ok());
    const std::set<std::string> before = tree(root);

    GcPolicy p;
    p.keep_last = 1;
    p.grace_seconds = 60;
    {
        HeldLock lock(s3 + "/index.h5");   // e.g. h5py has it open "r+"
        ASSERT_TRUE(lock.locked());
        auto g = gc(root, p);
        ASSERT_TRUE(g.ok()) << g.error();
        ASSERT_EQ(g.value().unreadable.size(), 1u);
        EXPECT_EQ(g.value().unreadable[0].rfind("step-0000000003: unreadable: ", 0), 0u) << g.value().unreadable[0];
        EXPECT_EQ(g.value().removed, (std::vector<std::string>{".step-0000000004.partial-a"}));
        EXPECT_TRUE(g.value().removed_files.empty());
        EXPECT_EQ(g.value().skipped, (std::vector<std::string>{".step-0000000004.partial-b"}));
        std::set<std::string> want = before;
        want.erase(".step-0000000004.partial-a");
        want.erase(".step-0000000004.partial-a/shard-00000.h5.tmp");
        EXPECT_EQ(tree(root), want);   // every committed checkpoint and file is still there
        EXPECT_EQ(latest_target(root), "step-0000000003");
    }
    // Readable again: the policy applies as usual.
    auto g = gc(root, p);
    ASSERT_TRUE(g.ok()) << g.error();
    EXPECT_TRUE(g.value().unreadable.empty());
    EXPECT_EQ(g.value().kept, (std::vector<std::string>{"step-0000000003"}));
    EXPECT_FALSE(fsio::exists(root + "/step-0000000001"));
}

TEST(CatalogUnreadable, StepDirectoryWhoseIndexRecordsAnotherStepIsKeptAndNotLoaded) {
    TempDir d;
    const std::string root = d / "root";
    write_step(root, 1);
    const std::string s2 = write_step(root, 2);
    stdfs::copy(s2, root + "/step-0000000009", stdfs::copy_options::recursive);   // by hand

    auto l = list(root);
    ASSERT_TRUE(l.ok()) << l.error();
    const CheckpointEntry *e9 = find(l.value(), "step-0000000009");
    ASSERT_TRUE(e9);
    EXPECT_TRUE(e9->complete && e9->unreadable);
    EXPECT_NE(e9->problem.find("records step 2"), std::string::npos) << e9->problem;

    auto r = Reader::open_latest(root);
    ASSERT_FALSE(r.ok()) << "loaded " << r.value()->path();
    EXPECT_NE(r.error().find("step-0000000009/index.h5 records step 2"), std::string::npos) << r.error();

    const std::set<std::string> before = tree(root);
    GcPolicy p;
    p.keep_last = 1;
    p.grace_seconds = 0;
    auto g = gc(root, p);
    ASSERT_TRUE(g.ok()) << g.error();
    ASSERT_EQ(g.value().unreadable.size(), 1u);
    EXPECT_EQ(tree(root), before);
}

TEST(CatalogUnreadable, OpenLatestFailsOnAnUnreadableNewestInsteadOfLoadingAnOlderOne) {
    TempDir d;
    const std::string root = d / "root";
    write_step(root, 1);
    const std::string s2 = write_step(root, 2);
    ASSERT_TRUE(fsio::write_file(s2 + "/index.h5", "not an HDF5 file").ok());
    auto r = Reader::open_latest(root);
    ASSERT_FALSE(r.ok()) << "silently loaded " << r.value()->path();
    EXPECT_NE(r.error().find(s2 + "/index.h5"), std::string::npos) << r.error();
}

// ---- defect: `latest` moved backwards -----------------------------------------------------

TEST(CatalogLatest, CommitOfALowerStepLeavesLatestOnTheHigherOne) {
    TempDir d;
    const std::string root = d / "root";
    write_step(root, 10);
    write_step(root, 5);
    EXPECT_EQ(latest_target(root), "step-0000000010");
    // A step directory without index.h5 (retired by gc) is not committed: it does not count.
    ASSERT_TRUE(fsio::remove_file(root + "/step-0000000010/index.h5").ok());
    write_step(root, 7);
    EXPECT_EQ(latest_target(root), "step-0000000007");
}

TEST(CatalogLatest, GcLeavesLatestOnACheckpointCommittedWhileItRan) {
    TempDir d;
    const std::string root = d / "root";
    write_step(root, 1);
    write_step(root, 2);
    bool committed = false;
    set_gc_before_latest_hook([&] {
        // After gc has listed the root and removed step 1: a trainer commits step 3.
        committed = !write_step(root, 3).empty();
    });
    GcPolicy p;
    p.keep_last = 1;
    p.grace_seconds = 0;
    auto g = gc(root, p);
    set_gc_before_latest_hook({});
    ASSERT_TRUE(g.ok()) << g.error();
    ASSERT_TRUE(committed);
    EXPECT_EQ(g.value().removed, (std::vector<std::string>{"step-0000000001"}));
    EXPECT_EQ(latest_target(root), "step-0000000003");
}

// ---- defect: merge/reshard outputs that gc later destroys ---------------------------------

TEST(CatalogRewrite, RefusesOutputsThatGcWouldDestroy) {
    TempDir d;
    const std::string root = d / "root";
    const std::string s5 = write_step(root, 5);
    const std::string s20 = write_step(root, 20);
    ASSERT_EQ(::symlink(s5.c_str(), (d / "link").c_str()), 0);
    const std::set<std::string> before = tree(d.path());

    struct Case {
        std::string out, expect;
    };
    const std::vector<Case> cases = {
        {s5 + "/sub", "lies inside the source checkpoint " + s5},
        {s5 + "/a/b", "lies inside the source checkpoint " + s5},
        {s5 + "/x/../sub", "lies inside the source checkpoint " + s5},
        {d / "link/sub", "lies inside the source checkpoint " + s5},
        {s20 + "/sub", "lies inside the checkpoint directory " + s20},
        {root + "/step-0000000030", "is named for step 30, but " + s5 + " holds step 5: expected step-0000000005"},
        {root + "/.step-0000000005.partial-x", "is named like a partial checkpoint directory"},
    };
    for (const auto &c : cases) {
        auto r = reshard(s5, 2, c.out);
        ASSERT_FALSE(r.ok()) << c.out;
        EXPECT_NE(r.error().find("output " + c.out + " " + c.expect), std::string::npos) << r.error();
        auto m = merge(s5, c.out);
        ASSERT_FALSE(m.ok()) << c.out;
        EXPECT_NE(m.error().find("output " + c.out + " " + c.expect), std::string::npos) << m.error();
    }
    EXPECT_EQ(tree(d.path()), before);   // nothing created, not even a partial directory

    // The same step's name in another root, and any other name, are fine.
    auto ok = merge(s20, d / "other/step-0000000020");
    ASSERT_TRUE(ok.ok()) << ok.error();
    auto l = list(d / "other");
    ASSERT_TRUE(l.ok());
    ASSERT_EQ(l.value().size(), 1u);
    EXPECT_TRUE(l.value()[0].complete && !l.value()[0].unreadable) << l.value()[0].problem;
    ok = reshard(s20, 2, d / "archive-20");
    ASSERT_TRUE(ok.ok()) << ok.error();
}
