// The session cache's disk tier: a backend's state as bytes and back is bit
// for bit the state; an engine restarted on the same directory serves a
// conversation's next turn from disk; outputs equal an engine without any
// cache (greedy and seeded) across restarts, under memory pressure that
// leaves only the disk, and with entries deleted, truncated, flipped or made
// for another model between turns; the budget holds and keeps chains whole;
// a failed write (a full disk) turns writing off; a piece that went is not
// built on; the directory is private, locked, named by hashes and holds no
// prompt text.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <fstream>
#include <random>
#include <set>

#include "backend_checks.h"
#include "backends/cpu/fast_backend.h"
#include "core/error.h"
#include "engine/disk_cache.h"
#include "engine_test_util.h"

namespace tern::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// A fresh directory per test, removed after it.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("tern_disk_" + name + "_" + std::to_string(getpid())) /
             "cache") {
    fs::remove_all(path.parent_path());
  }
  ~TempDir() { fs::remove_all(path.parent_path()); }
  std::vector<fs::path> files(const std::string& ext) const {
    std::vector<fs::path> out;
    for (const auto& d : fs::directory_iterator(path))
      if (d.path().extension() == ext) out.push_back(d.path());
    std::sort(out.begin(), out.end());
    return out;
  }
};

EngineOptions with_disk(const TempDir& d, size_t memory = size_t(1) << 30) {
  EngineOptions o;
  o.snapshot_every = 16;
  o.chunk = 8;
  o.cache_bytes = memory;
  o.cache_dir = d.path.string();
  o.cache_disk = size_t(1) << 30;
  o.model_id = "tiny test model";
  return o;
}

EngineOptions no_cache() {
  EngineOptions o;
  o.snapshot_every = 16;
  o.chunk = 8;
  o.cache_bytes = 0;
  return o;
}

json first_turn() {
  return json::array({{{"role", "system"}, {"content", "You are terse, and you like rivers."}},
                      {{"role", "user"}, {"content", "Name three long rivers, please."}}});
}

// Runs r on `e` and on an engine without a cache; returns e's output.
Output exact(TinyModel& m, Engine& e, const Request& r, const std::string& what) {
  Engine fresh(m.be, &m.tok, no_cache());
  const Output a = run_all(e, r), b = run_all(fresh, r);
  expect_same(a, b, what);
  return a;
}

// The reference's bytes: test_session_state; CUDA's: test_cuda_session.
TEST(DiskCache, BackendBytesRoundTripExactly) {
  TinyModel m(61);
  FastCpuBackend fast(load_model(m.dir, WeightMode::q4));
  check_bytes_round_trip(fast);
  EXPECT_NE(m.be.numerics_id(), fast.numerics_id());
  EXPECT_NE(fast.numerics_id().find("threads="), std::string::npos);
}

TEST(DiskCache, ARestartedEngineServesTheNextTurnFromDisk) {
  TinyModel m(62);
  TempDir d("restart");
  for (bool sampled : {false, true}) {
    fs::remove_all(d.path);
    json msgs = first_turn();
    std::string answer;
    {
      Engine e(m.be, &m.tok, with_disk(d));
      answer = exact(m, e, request(m.chat(msgs), 3, sampled), "turn 1").content;
    }  // the engine is gone; its queued writes were written first
    EXPECT_FALSE(d.files(".kv").empty());
    EXPECT_FALSE(d.files(".state").empty());
    msgs.push_back({{"role", "assistant"}, {"content", answer}});
    msgs.push_back({{"role", "user"}, {"content", "And a short one?"}});
    Engine e(m.be, &m.tok, with_disk(d));
    const Output b = exact(m, e, request(m.chat(msgs), 4, sampled), "turn 2");
    EXPECT_GT(b.result.disk_tokens, 20);
    EXPECT_EQ(b.result.cached_tokens, b.result.disk_tokens);
    EXPECT_EQ(e.disk()->stats().hits, 1u);
    // The loaded state is in memory now: an exact repeat needs no disk.
    const Output c = exact(m, e, request(m.chat(msgs), 4, sampled), "repeat");
    EXPECT_EQ(c.result.disk_tokens, 0);
    EXPECT_GT(c.result.cached_tokens, b.result.cached_tokens);
  }
}

// Random new turns, edits and branches of a few conversations with too
// little memory for more than one session: what was evicted comes back from
// disk, and every output is a cold engine's.
TEST(DiskCache, SpillsUnderMemoryPressureAreExact) {
  TinyModel m(63);
  TempDir d("pressure");
  size_t one_session = 0;
  {
    Engine probe(m.be, &m.tok, with_disk(d));
    run_all(probe, request(m.chat(first_turn()), 1, false));
    one_session = probe.cache().bytes();
  }
  fs::remove_all(d.path);
  Engine e(m.be, &m.tok, with_disk(d, one_session));
  std::mt19937 g(11);
  std::vector<json> convs;
  int64_t from_disk = 0;
  for (int step = 0; step < 24; ++step) {
    const int op = int(g() % 4);
    if (convs.size() < 3 || op == 0) convs.push_back(new_conversation(g));
    size_t at = g() % convs.size();
    if (op == 1 && convs[at].size() > 3) {  // branch from an earlier turn
      json b = json::array();
      for (size_t i = 0; i + 2 < convs[at].size(); ++i) b.push_back(convs[at][i]);
      b.push_back({{"role", "user"}, {"content", random_words(g)}});
      convs.push_back(b);
      at = convs.size() - 1;
    }
    e.disk()->flush();  // a client's next turn comes after the writes, as a person's does
    const Output a = exact(m, e, request(m.chat(convs[at]), uint64_t(step), g() % 2 == 0),
                           "step " + std::to_string(step));
    from_disk += a.result.disk_tokens;
    EXPECT_LE(e.cache().bytes(), one_session);
    convs[at].push_back({{"role", "assistant"}, {"content", a.content}});
    convs[at].push_back({{"role", "user"}, {"content", random_words(g)}});
  }
  EXPECT_GT(from_disk, 100);
  EXPECT_GT(e.disk()->stats().hits, 3u);
}

// With no memory budget at all, every reuse comes from disk.
TEST(DiskCache, DiskOnlyIsExact) {
  TinyModel m(64);
  TempDir d("diskonly");
  Engine e(m.be, &m.tok, with_disk(d, 0));
  json msgs = first_turn();
  for (int turn = 0; turn < 3; ++turn) {
    e.disk()->flush();
    const Output a = exact(m, e, request(m.chat(msgs), 7, true), "turn " + std::to_string(turn));
    if (turn > 0) {
      EXPECT_GT(a.result.disk_tokens, 0) << turn;
    }
    EXPECT_EQ(e.cache().bytes(), 0u);
    msgs.push_back({{"role", "assistant"}, {"content", a.content}});
    msgs.push_back({{"role", "user"}, {"content", "more " + std::to_string(turn)}});
  }
}

// Damage between turns: the damaged entry (and what needs it) is removed, the
// turn prefills from the best intact prefix, and the output is still exact.
TEST(DiskCache, DamagedEntriesAreRemovedAndNeverUsed) {
  TinyModel m(65);
  TempDir d("damage");
  enum Damage { flip_payload, flip_token, truncate, remove_piece, remove_state, foreign_header };
  for (Damage damage :
       {flip_payload, flip_token, truncate, remove_piece, remove_state, foreign_header}) {
    const std::string what = "damage " + std::to_string(int(damage));
    fs::remove_all(d.path);
    json msgs = first_turn();
    std::string answer;
    {
      Engine e(m.be, &m.tok, with_disk(d));
      answer = run_all(e, request(m.chat(msgs), 1, false)).content;
    }
    msgs.push_back({{"role", "assistant"}, {"content", answer}});
    msgs.push_back({{"role", "user"}, {"content", "And a short one?"}});
    Engine e(m.be, &m.tok, with_disk(d));
    // Damage every file of a kind after start: loads find it, not the index.
    const auto victims = d.files(damage == remove_state ? ".state" : ".kv");
    ASSERT_FALSE(victims.empty());
    for (const fs::path& f : victims) {
      const auto size = fs::file_size(f);
      if (damage == remove_piece || damage == remove_state) {
        fs::remove(f);
        continue;
      }
      if (damage == truncate) {
        fs::resize_file(f, size - 3);
        continue;
      }
      // The header's key field, the first token id, the last payload byte.
      const std::streamoff at = damage == foreign_header ? 24
                                : damage == flip_token
                                    ? std::streamoff(EntryReader(f.string()).header().data_offset())
                                    : std::streamoff(size) - 1;
      std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
      io.seekg(at);
      char c = 0;
      io.read(&c, 1);
      c = char(c ^ 0x5a);
      io.seekp(at);
      io.write(&c, 1);
    }
    const Output b = exact(m, e, request(m.chat(msgs), 2, false), what);
    EXPECT_EQ(b.result.disk_tokens, 0) << what;
    EXPECT_GE(e.disk()->stats().removed, 1u) << what;
    // What is there now was written again by this turn, whole.
    e.disk()->flush();
    for (const fs::path& f : d.files(damage == remove_state ? ".state" : ".kv")) {
      EntryReader r(f.string());
      std::vector<std::byte> all(r.header().file_bytes() - r.header().data_offset());
      r.read(all);
      EXPECT_NO_THROW(r.finish()) << what << " " << f;
    }
  }
}

// A live session whose stored pieces went (here: found damaged by a load)
// stores its next snapshot's KV from the last piece still there, or from 0,
// never after a piece that is gone.
TEST(DiskCache, APieceGoneIsNotBuiltOn) {
  TinyModel m(70);
  TempDir d("chain");
  DiskCache disk(m.be, {.dir = d.path.string(), .budget = size_t(1) << 30, .binding = "test"});
  const std::vector<int32_t> ids = ids_from(40, 3, m.be.config().vocab);
  auto seq = m.be.new_sequence();
  std::set<int64_t> pieces;
  std::vector<float> none;
  PrefillPlan plan;
  for (int64_t at = 10; at <= 40; at += 10) {
    m.be.forward(*seq, std::span(ids).subspan(size_t(at - 10), 10), Logits::none, none);
    if (at == 40) {  // damage the first piece; a load finds it and removes the chain
      disk.flush();
      fs::resize_file(d.path / entry_name(EntryKind::kv,
                                          prefix_key(hash64("test", 4), std::span(ids).first(10))),
                      100);
      EXPECT_FALSE(disk.load(std::span(ids).first(31), plan, 0));
      EXPECT_EQ(disk.stats().removed, 1u);
    }
    disk.store(std::span(ids).first(size_t(at)), *seq, m.be.save(*seq), pieces);
    plan.stops.push_back({at, true});
  }
  EXPECT_EQ(pieces, (std::set<int64_t>{40}));
  disk.flush();
  auto loaded = disk.load(ids, plan, 0);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->seq->length(), 40);
  EXPECT_EQ(loaded->ends, (std::vector<int64_t>{40}));
}

TEST(DiskCache, AnotherModelsEntriesAreRemovedAtStart) {
  TinyModel m(66);
  TempDir d("foreign");
  {
    Engine e(m.be, &m.tok, with_disk(d));
    run_all(e, request(m.chat(first_turn()), 1, false));
  }
  ASSERT_FALSE(d.files(".kv").empty());
  EngineOptions other = with_disk(d);
  other.model_id = "another model";
  Engine e(m.be, &m.tok, other);
  EXPECT_TRUE(d.files(".kv").empty());
  EXPECT_TRUE(d.files(".state").empty());
  EXPECT_GT(e.disk()->stats().removed, 0u);
  EXPECT_EQ(exact(m, e, request(m.chat(first_turn()), 1, false), "after").result.disk_tokens, 0);
}

TEST(DiskCache, TheBudgetHoldsAndKeepsChainsWhole) {
  TinyModel m(67);
  TempDir d("budget");
  EngineOptions o = with_disk(d);
  size_t one = 0;
  {
    Engine e(m.be, &m.tok, o);
    run_all(e, request(m.chat(first_turn()), 1, false));
    e.disk()->flush();
    one = e.disk()->stats().bytes;
  }
  fs::remove_all(d.path);
  o.cache_disk = 3 * one;
  o.cache_bytes = 0;
  Engine e(m.be, &m.tok, o);
  json last;
  for (int i = 0; i < 8; ++i) {
    last = first_turn();
    last[1]["content"] = "Question number " + std::to_string(i) + " about rivers?";
    run_all(e, request(m.chat(last), 1, false));
    e.disk()->flush();
    EXPECT_LE(e.disk()->stats().bytes, o.cache_disk);
  }
  // The newest conversation is still whole on disk.
  EXPECT_GT(exact(m, e, request(m.chat(last), 1, false), "newest").result.disk_tokens, 0);
}

// A write that fails (here the file size limit, as a full disk would) turns
// writing off with one warning; requests go on, exact.
TEST(DiskCache, AFailedWriteKeepsToMemory) {
  TinyModel m(68);
  TempDir d("full");
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 200;
  setrlimit(RLIMIT_FSIZE, &small);
  {
    Engine e(m.be, &m.tok, with_disk(d));
    json msgs = first_turn();
    for (int turn = 0; turn < 2; ++turn) {
      e.disk()->flush();
      const Output a = exact(m, e, request(m.chat(msgs), 1, false), "turn");
      msgs.push_back({{"role", "assistant"}, {"content", a.content}});
      msgs.push_back({{"role", "user"}, {"content", "more"}});
    }
    e.disk()->flush();
    EXPECT_FALSE(e.disk()->stats().writing);
    EXPECT_EQ(e.disk()->stats().writes, 0u);
  }
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_TRUE(d.files(".kv").empty());
  for (const auto& f : fs::directory_iterator(d.path))
    EXPECT_FALSE(f.path().filename().string().starts_with(kTempPrefix)) << f.path();
}

TEST(DiskCache, TheDirectoryIsPrivateLockedAndHoldsNoText) {
  TinyModel m(69);
  TempDir d("private");
  const std::string secret = "Zanzibar-walrus-7731";
  {
    Engine e(m.be, &m.tok, with_disk(d));
    json msgs = json::array({{{"role", "user"}, {"content", "My password is " + secret}}});
    run_all(e, request(m.chat(msgs), 1, false));
    EXPECT_THROW((DiskCache(m.be, {.dir = d.path.string(), .budget = 1 << 20, .binding = "x"})),
                 CacheDirBusy);
    // Another engine on it keeps to memory.
    EXPECT_EQ(Engine(m.be, &m.tok, with_disk(d)).disk(), nullptr);
  }
  struct stat st {};
  ASSERT_EQ(::stat(d.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  size_t n = 0;
  for (const auto& f : fs::directory_iterator(d.path)) {
    const std::string name = f.path().filename().string();
    if (name == kLockName) continue;
    ++n;
    EXPECT_TRUE(parse_entry_name(name)) << name;
    ASSERT_EQ(::stat(f.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << name;
    std::ifstream in(f.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(bytes.find("walrus"), std::string::npos) << name;
    EXPECT_EQ(bytes.find("password"), std::string::npos) << name;
  }
  EXPECT_GT(n, 0u);
}

}  // namespace
}  // namespace tern::test
