// The store's offer journal (host/src/offer_journal.h, wire-format.md §5.3):
// an offered trial journaled but not committed when the host dies is in the
// database once the store is opened again, exactly once. A host that dies is
// a child process that ends with _exit (no destructor, no commit).
#include "offer_journal.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "host/engine_testing.h"
#include "test_util.h"
#include "tunehost/host/engine.h"
#include "tunehost/host/store.h"

namespace tunehost::host {
namespace {

namespace fs = std::filesystem;
using engine_testing::MakeTrial;

class OfferJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tunehost-journal-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "store.db";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Store> Open(Store::Mode mode) {
    std::unique_ptr<Store> s;
    Status st = Store::Open(file_, mode, &s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return s;
  }

  // Runs `body` in a child process, which dies without closing the store
  // it opened (`body` ends with Die(store)).
  static void DieAfter(const std::function<void()>& body) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      body();
      _exit(1);  // an assertion failed and returned before Die
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  static void Die(std::unique_ptr<Store>& s) {
    (void)s.release();
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }

  // A trial offered (attempt 2, to worker w1) in the open batch.
  static Trial Offered(Store& s, const std::string& id, uint64_t seq) {
    Trial t = MakeTrial(id, seq);
    t.state = TrialState::kOffered;
    t.attempt = 2;
    t.offers = 3;
    t.worker_id = "w1";
    s.PutTrial(t, 1000.0 + static_cast<double>(seq), 0, 0, -1, "key-1");
    s.AddTrialEvent(t.id, "offered", t.attempt, t.worker_id, "");
    return t;
  }

  int64_t Rows(const char* table) { return Open(Store::Mode::kReadOnly)->CountRows(table); }

  std::string JournalBytes() {
    std::ifstream in(OfferJournal::For(file_), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void SetJournalBytes(const std::string& bytes) {
    std::ofstream(OfferJournal::For(file_), std::ios::binary | std::ios::trunc) << bytes;
  }

  fs::path dir_, file_;
};

TEST_F(OfferJournalTest, AnOfferJournaledButNotCommittedIsStoredWhenTheStoreOpensAgain) {
  Trial offered;
  DieAfter([&] {
    auto s = Open(Store::Mode::kCreate);
    s->SetMeta("status", "RUNNING");
    ASSERT_OK(s->Commit());
    offered = Offered(*s, "T1", 1);
    ASSERT_OK(s->JournalTrial("T1"));
    // Written in the batch, never journaled: lost with the batch.
    s->PutTrial(MakeTrial("T2", 2), 1.0, 0, 0, -1);
    Die(s);
  });
  EXPECT_EQ(Rows("trials"), 0) << "the child committed the offer";
  auto s = Open(Store::Mode::kOpen);
  EXPECT_EQ(s->replayed_offers(), 1u);
  std::vector<StoredTrial> trials;
  ASSERT_OK(s->Trials(&trials));
  ASSERT_EQ(trials.size(), 1u);
  const StoredTrial& t = trials[0];
  EXPECT_EQ(t.trial_id, "T1");
  EXPECT_EQ(t.state, "OFFERED");
  EXPECT_EQ(t.attempt, 2u);
  EXPECT_EQ(t.offers, 3u);
  EXPECT_EQ(t.worker_id, "w1");
  EXPECT_EQ(t.worker_key, "key-1");
  EXPECT_EQ(t.parameter_id, MakeTrial("T1", 1).parameter_id);
  EXPECT_EQ(t.parameters, MakeTrial("T1", 1).parameters);
  EXPECT_DOUBLE_EQ(t.created, 1001.0);
  EXPECT_EQ(s->CountRows("trial_events"), 1);
  s.reset();
  // Replayed once: a second open finds nothing to replay.
  s = Open(Store::Mode::kOpen);
  EXPECT_EQ(s->replayed_offers(), 0u);
  EXPECT_EQ(s->CountRows("trial_events"), 1);
}

TEST_F(OfferJournalTest, ARecordACommitCoveredIsNotReplayedEvenWhenTheJournalKeptIt) {
  const fs::path copy = dir_ / "journal-before-commit";
  DieAfter([&] {
    auto s = Open(Store::Mode::kCreate);
    Offered(*s, "T1", 1);
    ASSERT_OK(s->JournalTrial("T1"));
    fs::copy_file(OfferJournal::For(file_), copy);
    ASSERT_OK(s->Commit());
    Die(s);
  });
  // As if the host died after the commit and before the journal's reset.
  fs::copy_file(copy, OfferJournal::For(file_), fs::copy_options::overwrite_existing);
  {
    OfferJournal journal(OfferJournal::For(file_));
    std::vector<JournalRecord> records;
    size_t torn = 0;
    ASSERT_OK(journal.ReadAll(&records, &torn));
    ASSERT_EQ(records.size(), 1u) << "the copy holds the record";
  }
  auto s = Open(Store::Mode::kOpen);
  EXPECT_EQ(s->replayed_offers(), 0u);
  EXPECT_EQ(s->CountRows("trials"), 1);
  EXPECT_EQ(s->CountRows("trial_events"), 1) << "the offer's events were written twice";
}

TEST_F(OfferJournalTest, ATornRecordEndsTheJournalAndTheRecordsBeforeItAreStored) {
  DieAfter([&] {
    auto s = Open(Store::Mode::kCreate);
    Offered(*s, "T1", 1);
    ASSERT_OK(s->JournalTrial("T1"));
    Offered(*s, "T2", 2);
    ASSERT_OK(s->JournalTrial("T2"));
    Die(s);
  });
  std::string bytes = JournalBytes();
  const uint32_t first = static_cast<uint8_t>(bytes[0]) | static_cast<uint8_t>(bytes[1]) << 8;
  // The second record's body cut short (its length says more than follows).
  bytes[4 + first + 4 + 10] = '\xc1';  // a byte MessagePack never uses
  SetJournalBytes(bytes);
  auto s = Open(Store::Mode::kOpen);
  EXPECT_EQ(s->replayed_offers(), 1u);
  std::vector<StoredTrial> trials;
  ASSERT_OK(s->Trials(&trials));
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].trial_id, "T1");
}

TEST_F(OfferJournalTest, ANewStoreIgnoresALeftoverJournal) {
  DieAfter([&] {
    auto s = Open(Store::Mode::kCreate);
    Offered(*s, "T1", 1);
    ASSERT_OK(s->JournalTrial("T1"));
    Die(s);
  });
  fs::remove(file_);
  auto s = Open(Store::Mode::kCreate);
  EXPECT_EQ(s->replayed_offers(), 0u);
  EXPECT_EQ(s->CountRows("trials"), 0);
}

TEST_F(OfferJournalTest, ATrialOfferedTwiceInOneBatchHasEachEventReplayedOnce) {
  DieAfter([&] {
    auto s = Open(Store::Mode::kCreate);
    Trial t = Offered(*s, "T1", 1);
    ASSERT_OK(s->JournalTrial("T1"));
    s->AddTrialEvent(t.id, "rejected", t.attempt, t.worker_id, "busy");
    t.attempt = 3;
    s->PutTrial(t, 1001.0, 0, 0, -1, "key-1");
    s->AddTrialEvent(t.id, "offered", t.attempt, "w2", "");
    ASSERT_OK(s->JournalTrial("T1"));
    Die(s);
  });
  auto s = Open(Store::Mode::kOpen);
  EXPECT_EQ(s->replayed_offers(), 2u);
  EXPECT_EQ(s->CountRows("trial_events"), 3);
  std::vector<StoredTrial> trials;
  ASSERT_OK(s->Trials(&trials));
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].attempt, 3u) << "the later record is the trial's row";
}

TEST_F(OfferJournalTest, OnlyTrialsWrittenInTheOpenBatchAreJournaled) {
  auto s = Open(Store::Mode::kCreate);
  Offered(*s, "T1", 1);
  ASSERT_OK(s->Commit());
  EXPECT_EQ(s->JournalTrial("T1").code(), Status::Code::kNotFound);
  EXPECT_EQ(s->JournalTrial("nope").code(), Status::Code::kNotFound);
}

TEST_F(OfferJournalTest, AJournalThatCannotBeAllocatedIsAnErrorNotACrash) {
  // A disk that cannot hold the journal (here: a file size limit): the
  // journal says so, and the caller commits instead (Server::Offerable).
  DieAfter([&] {
    auto s = Open(Store::Mode::kCreate);
    Offered(*s, "T1", 1);
    signal(SIGXFSZ, SIG_IGN);
    const rlimit small{4096, 4096};
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    const Status st = s->JournalTrial("T1");
    EXPECT_EQ(st.code(), Status::Code::kUnavailable) << st.ToString();
    EXPECT_NE(st.message().find("cannot allocate offer journal"), std::string::npos)
        << st.message();
    Die(s);
  });
}

TEST_F(OfferJournalTest, AFullJournalRefusesARecordAndKeepsTheOthers) {
  OfferJournal journal(OfferJournal::For(file_));
  JournalRecord r;
  r.trial.trial_id = "T";
  r.trial.parameters.assign(10 * 1024, 'p');
  size_t appended = 0;
  Status st;
  while ((st = journal.Append(r)).ok()) {
    ++r.seq;
    ++appended;
    ASSERT_LT(appended, 100u);
  }
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("full"), std::string::npos) << st.message();
  EXPECT_EQ(appended, OfferJournal::kCapacity / (10 * 1024 + 64));
  OfferJournal reader(OfferJournal::For(file_));
  std::vector<JournalRecord> records;
  size_t torn = 0;
  ASSERT_OK(reader.ReadAll(&records, &torn));
  EXPECT_EQ(records.size(), appended);
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(records.back().seq, appended - 1);
  ASSERT_OK(journal.Clear());
  ASSERT_OK(reader.ReadAll(&records, &torn));
  EXPECT_TRUE(records.empty());
}

}  // namespace
}  // namespace tunehost::host
