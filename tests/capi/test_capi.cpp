// The C API (tools/capi/gpumix.h) on thread ranks: training, then the model from C
// (gpumix_forward's logits and per-token losses, gpumix_evaluate, gpumix_generate, which
// must sample the ids `gpumix generate --prompt-ids` prints for the same checkpoint and
// seed), a session that only loads a checkpoint, one session per run folder, and bad calls,
// each a -1 with a message that names the problem and the numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.h"
#include "tools/capi/gpumix.h"

namespace {

namespace fs = std::filesystem;

using gpumix::capi::test::corpus_bytes;
using gpumix::capi::test::TinyConfig;

std::string error() { return gpumix_last_error(); }

// Expects a failed call (rc -1) whose message holds every part.
void expect_error(int rc, std::initializer_list<std::string> parts) {
  EXPECT_EQ(rc, -1);
  const std::string message = error();
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' missing from: " << message;
}

class CApi : public ::testing::Test {
 protected:
  static std::string dir_;
  static std::vector<int32_t> tokens_;
  static gpumix_session* trained_;

  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("gpumix_test_capi_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tokens_ = corpus_bytes();
    const TinyConfig cfg(dir_ + "/trained");
    trained_ = gpumix_session_create(&cfg.c);
    ASSERT_NE(trained_, nullptr) << error();
    ASSERT_EQ(gpumix_train(trained_, tokens_.data(), (int64_t)tokens_.size(), 2), 0) << error();
  }
  static void TearDownTestSuite() {
    gpumix_session_destroy(trained_);
    fs::remove_all(dir_);
  }
};
std::string CApi::dir_;
std::vector<int32_t> CApi::tokens_;
gpumix_session* CApi::trained_ = nullptr;

TEST_F(CApi, TheModelsShapeIsTheCheckpoints) {
  gpumix_model_info info{};
  ASSERT_EQ(gpumix_get_model_info(trained_, &info), 0) << error();
  EXPECT_EQ(info.vocab, 256);
  EXPECT_EQ(info.context, 16);
  EXPECT_EQ(info.layers, 4);  // gpt-nano
  EXPECT_EQ(info.heads, 4);
  EXPECT_EQ(info.channels, 128);
  EXPECT_GT(info.params, 0);
  EXPECT_NE(gpumix_checkpoint(trained_), nullptr);
}

// Per-token losses are the logits' log-sum-exp minus the target's logit, and their mean is
// gpumix_evaluate's. fp32 sums of V terms: within V * FLT_EPSILON * (1 + |loss|).
TEST_F(CApi, ForwardLossesMatchItsLogitsAndEvaluate) {
  const int64_t B = 3, T = 16, V = 256;
  std::vector<float> logits(B * T * V), losses(B * T);
  ASSERT_EQ(gpumix_forward(trained_, tokens_.data(), nullptr, B, T, logits.data()), 0) << error();
  ASSERT_EQ(gpumix_forward(trained_, tokens_.data(), tokens_.data() + 1, B, T, losses.data()), 0) << error();
  double sum = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    const float* row = logits.data() + i * V;
    double top = row[0], z = 0;
    for (int64_t v = 1; v < V; ++v) top = std::max<double>(top, row[v]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - top);
    const double loss = top + std::log(z) - row[tokens_[i + 1]];
    EXPECT_NEAR(losses[i], loss, V * FLT_EPSILON * (1 + std::fabs(loss))) << "position " << i;
    sum += losses[i];
  }
  double mean = 0;
  ASSERT_EQ(gpumix_evaluate(trained_, tokens_.data(), B * T + 1, &mean), 0) << error();
  EXPECT_NEAR(mean, sum / (B * T), V * FLT_EPSILON * (1 + mean));
  // An ignored target (-1) costs nothing.
  std::vector<int32_t> targets(tokens_.begin() + 1, tokens_.begin() + 1 + T);
  targets[3] = -1;
  std::vector<float> one(T);
  ASSERT_EQ(gpumix_forward(trained_, tokens_.data(), targets.data(), 1, T, one.data()), 0) << error();
  EXPECT_EQ(one[3], 0.0f);
  EXPECT_EQ(one[4], losses[4]);
  // Shorter sequences than the context work; the first positions see the same context.
  std::vector<float> short_logits(2 * 5 * V);
  std::vector<int32_t> short_tokens(tokens_.begin(), tokens_.begin() + 5);
  short_tokens.insert(short_tokens.end(), tokens_.begin() + T, tokens_.begin() + T + 5);
  ASSERT_EQ(gpumix_forward(trained_, short_tokens.data(), nullptr, 2, 5, short_logits.data()), 0) << error();
  for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(short_logits[4 * V + v], logits[4 * V + v], 1e-4) << v;
}

TEST_F(CApi, GenerateSamplesWhatTheGpumixProgramSamples) {
  const std::vector<int32_t> prompt = {84, 104, 101};  // "The"
  std::vector<int32_t> ids(12), again(12);
  ASSERT_EQ(gpumix_generate(trained_, prompt.data(), 3, 12, 0.8f, 20, 5, ids.data()), 0) << error();
  ASSERT_EQ(gpumix_generate(trained_, prompt.data(), 3, 12, 0.8f, 20, 5, again.data()), 0) << error();
  EXPECT_EQ(ids, again);
  std::vector<int32_t> greedy(12);
  ASSERT_EQ(gpumix_generate(trained_, prompt.data(), 3, 12, 0.0f, 0, 5, greedy.data()), 0) << error();

  const std::string out = dir_ + "/generate.out";
  const std::string cmd = std::string("OMP_NUM_THREADS=1 '") + GPUMIX_EXE + "' generate --ckpt '" +
                          gpumix_checkpoint(trained_) +
                          "' --prompt-ids 84,104,101 --tokens 12 --temperature 0.8 --top-k 20 --seed 5 >'" + out + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  std::vector<int32_t> cli;
  for (int32_t id; in >> id;) cli.push_back(id);
  ASSERT_EQ(cli.size(), 15u);
  EXPECT_EQ(std::vector<int32_t>(cli.begin() + 3, cli.end()), ids) << "gpumix generate sampled other ids";
}

TEST_F(CApi, EvaluateIsWhatGpumixEvalSays) {
  double mean = 0;
  ASSERT_EQ(gpumix_evaluate(trained_, tokens_.data(), (int64_t)tokens_.size(), &mean), 0) << error();
  // The same tokens (the corpus's bytes) as a token file, through the program.
  const std::string tok = dir_ + "/bytes.tok", out = dir_ + "/eval.out";
  const std::string exe = std::string("OMP_NUM_THREADS=1 '") + GPUMIX_EXE + "'";
  std::string cmd = exe + " tokenizer encode --bytes --data '" + GPUMIX_TESTS_DATA_DIR + "/tiny_corpus.txt' --out '" +
                    tok + "' >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  cmd = exe + " eval --ckpt '" + gpumix_checkpoint(trained_) + "' --data '" + tok + "' >'" + out + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  const size_t at = line.find("\"loss\":");
  ASSERT_NE(at, std::string::npos) << line;
  const double cli = std::strtod(line.c_str() + at + 7, nullptr);
  // The same windows and fp32 losses, summed in double in groups (mean_loss per 64 windows):
  // equal up to double rounding.
  EXPECT_NEAR(cli, mean, 1e-12 * mean) << line;
}

// The library prints nothing unless asked: a quiet session (the default) writes nothing to
// stdout or stderr, and a session with a callback and a log file gets its lines there, and
// still nothing on stdout or stderr, whatever it logs.
TEST_F(CApi, TheLibraryIsQuietUnlessAsked) {
  using gpumix::capi::test::CapturedOutput;
  using gpumix::capi::test::LogLines;
  {
    CapturedOutput captured(dir_ + "/quiet.out");
    const TinyConfig cfg(dir_ + "/quiet");
    gpumix_session* s = gpumix_session_create(&cfg.c);
    const bool created = s != nullptr;
    const int trained = created ? gpumix_train(s, tokens_.data(), (int64_t)tokens_.size(), 2) : -2;
    double mean = 0;
    const int evaluated = created ? gpumix_evaluate(s, tokens_.data(), (int64_t)tokens_.size(), &mean) : -2;
    gpumix_session_destroy(s);
    const std::string out = captured.take();
    ASSERT_TRUE(created) << error();
    EXPECT_EQ(trained, 0) << error();
    EXPECT_EQ(evaluated, 0) << error();
    EXPECT_EQ(out, "") << "a quiet session printed";
  }
  {
    // Two thread ranks, a callback and a file, at info.
    LogLines got;
    TinyConfig cfg(dir_ + "/logged");
    const std::string file = dir_ + "/logged.log";
    cfg.c.devices = "cpu,cpu";
    cfg.c.plan = "even";
    cfg.c.log_level = GPUMIX_LOG_INFO;
    cfg.c.log_callback = &LogLines::receive;
    cfg.c.log_user = &got;
    cfg.c.log_file = file.c_str();
    CapturedOutput captured(dir_ + "/logged.out");
    gpumix_session* s = gpumix_session_create(&cfg.c);
    const int trained = s ? gpumix_train(s, tokens_.data(), (int64_t)tokens_.size(), 2) : -2;
    gpumix_session_destroy(s);
    const std::string out = captured.take();
    ASSERT_EQ(trained, 0) << error();
    EXPECT_EQ(out, "") << "a session with a callback printed";
    EXPECT_TRUE(got.any("| model ")) << got.text();  // the settings table
    EXPECT_TRUE(got.any("step 1/4 | loss ")) << got.text();
    EXPECT_TRUE(got.any("step 2/4 | loss ")) << got.text();
    EXPECT_TRUE(got.any("validation loss ")) << got.text();
    EXPECT_FALSE(got.any("rank 1 of 2")) << "a debug line at info: " << got.text();
    for (const auto& [level, line] : got.lines) {
      EXPECT_GE(level, GPUMIX_LOG_ERROR) << line;
      EXPECT_LE(level, GPUMIX_LOG_INFO) << line;
      EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per call: " << line;
    }
    std::ifstream in(file);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), got.text());
  }
  {
    // Debug: each rank's own line, of rank 0 only by default; with log_all_ranks, every rank's.
    for (const int all : {0, 1}) {
      LogLines got;
      TinyConfig cfg(dir_ + "/debug" + std::to_string(all));
      cfg.c.devices = "cpu,cpu";
      cfg.c.plan = "even";
      cfg.c.log_level = GPUMIX_LOG_DEBUG;
      cfg.c.log_callback = &LogLines::receive;
      cfg.c.log_user = &got;
      cfg.c.log_all_ranks = all;
      CapturedOutput captured(dir_ + "/debug.out");
      gpumix_session* s = gpumix_session_create(&cfg.c);
      const int trained = s ? gpumix_train(s, tokens_.data(), (int64_t)tokens_.size(), 1) : -2;
      gpumix_session_destroy(s);
      EXPECT_EQ(captured.take(), "");
      ASSERT_EQ(trained, 0) << error();
      EXPECT_TRUE(got.any("rank 0 of 2: cpu:0")) << got.text();
      EXPECT_EQ(got.any("[rank 1] rank 1 of 2: cpu:1"), all == 1) << got.text();
      EXPECT_EQ(got.any("[rank 0] "), all == 1) << got.text();
    }
  }
  // A level that is none, and a log file that cannot be written, are refused.
  TinyConfig bad(dir_ + "/bad_log");
  bad.c.log_level = 7;
  EXPECT_EQ(gpumix_session_create(&bad.c), nullptr);
  EXPECT_NE(error().find("log_level 7"), std::string::npos) << error();
  bad.c.log_level = GPUMIX_LOG_INFO;
  bad.c.log_file = "/nonexistent-folder/x.log";
  EXPECT_EQ(gpumix_session_create(&bad.c), nullptr);
  EXPECT_NE(error().find("/nonexistent-folder/x.log"), std::string::npos) << error();
}

// Prompts of lengths 3, 1 and 7 in one flat array: sequence 0 is gpumix_generate's; each
// sequence's ids depend neither on how many there are nor on the others' prompts; a stop id
// ends its sequence only (kept, then -1); top-p changes the samples.
TEST_F(CApi, GenerateBatchGivesEachSequenceItsOwnStream) {
  const std::vector<int32_t> flat = {84, 104, 101, 65, 32, 116, 104, 105, 110, 103, 115};
  const std::vector<int64_t> offsets = {0, 3, 4}, lengths = {3, 1, 7};
  const int32_t n = 12;
  std::vector<int32_t> out(3 * n, 7), len(3, 0);
  ASSERT_EQ(gpumix_generate_batch(trained_, flat.data(), offsets.data(), lengths.data(), 3, n, 0.8f, 20, 1.0f, 5,
                                  nullptr, 0, out.data(), len.data()),
            0)
      << error();
  EXPECT_EQ(len, (std::vector<int32_t>{n, n, n}));
  std::vector<int32_t> single(n);
  ASSERT_EQ(gpumix_generate(trained_, flat.data(), 3, n, 0.8f, 20, 5, single.data()), 0) << error();
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + n), single);
  // Sequence 2 alone in a batch of 3 with another middle prompt, and the first two alone.
  const std::vector<int64_t> other_offsets = {0, 8, 4};
  std::vector<int32_t> other(3 * n), other_len(3);
  ASSERT_EQ(gpumix_generate_batch(trained_, flat.data(), other_offsets.data(), lengths.data(), 3, n, 0.8f, 20, 1.0f,
                                  5, nullptr, 0, other.data(), other_len.data()),
            0)
      << error();
  EXPECT_EQ(std::vector<int32_t>(other.begin() + 2 * n, other.end()), std::vector<int32_t>(out.begin() + 2 * n, out.end()));
  EXPECT_NE(std::vector<int32_t>(other.begin() + n, other.begin() + 2 * n),
            std::vector<int32_t>(out.begin() + n, out.begin() + 2 * n));
  std::vector<int32_t> two(2 * n), two_len(2);
  ASSERT_EQ(gpumix_generate_batch(trained_, flat.data(), offsets.data(), lengths.data(), 2, n, 0.8f, 20, 1.0f, 5,
                                  nullptr, 0, two.data(), two_len.data()),
            0)
      << error();
  EXPECT_EQ(two, std::vector<int32_t>(out.begin(), out.begin() + 2 * n));
  // Stop at sequence 0's 5th id: it ends there, the id kept, the rest -1.
  const int32_t stop = out[4];
  const int32_t at = (int32_t)(std::find(out.begin(), out.begin() + n, stop) - out.begin());
  std::vector<int32_t> stopped(3 * n), stopped_len(3);
  ASSERT_EQ(gpumix_generate_batch(trained_, flat.data(), offsets.data(), lengths.data(), 3, n, 0.8f, 20, 1.0f, 5,
                                  &stop, 1, stopped.data(), stopped_len.data()),
            0)
      << error();
  EXPECT_EQ(stopped_len[0], at + 1);
  for (int32_t i = 0; i < n; ++i) EXPECT_EQ(stopped[i], i <= at ? out[i] : -1) << i;
  for (int j = 1; j < 3; ++j) {
    const auto row = out.begin() + j * n;
    const auto first = std::find(row, row + n, stop);
    EXPECT_EQ(stopped_len[j], first == row + n ? n : (int32_t)(first - row) + 1) << j;
  }
  // Bad calls.
  expect_error(gpumix_generate_batch(trained_, flat.data(), offsets.data(), lengths.data(), 3, n, 0.8f, 20, 0.0f, 5,
                                     nullptr, 0, out.data(), len.data()),
               {"top-p", "(0, 1]", "got 0"});
  const std::vector<int64_t> empty_len = {3, 0, 7};
  expect_error(gpumix_generate_batch(trained_, flat.data(), offsets.data(), empty_len.data(), 3, n, 0.8f, 20, 1.0f, 5,
                                     nullptr, 0, out.data(), len.data()),
               {"prompt 1", "length 0", ">= 1"});
  const int32_t bad_stop = 4000;
  expect_error(gpumix_generate_batch(trained_, flat.data(), offsets.data(), lengths.data(), 3, n, 0.8f, 20, 1.0f, 5,
                                     &bad_stop, 1, out.data(), len.data()),
               {"stop ids", "4000"});
  expect_error(gpumix_generate_batch(trained_, flat.data(), offsets.data(), lengths.data(), 3, n, 0.8f, 20, 1.0f, 5,
                                     nullptr, 2, out.data(), len.data()),
               {"n_stop", "2"});
}

TEST_F(CApi, ASessionThatOnlyLoadsACheckpoint) {
  TinyConfig cfg("");
  cfg.c.out_dir = nullptr;
  gpumix_session* s = gpumix_session_create(&cfg.c);
  ASSERT_NE(s, nullptr) << error();
  std::vector<float> logits(16 * 256);
  expect_error(gpumix_forward(s, tokens_.data(), nullptr, 1, 16, logits.data()),
               {"gpumix_forward", "no model yet", "gpumix_load"});
  expect_error(gpumix_train(s, tokens_.data(), (int64_t)tokens_.size(), 1), {"no run folder", "out_dir"});
  expect_error(gpumix_load(s, (dir_ + "/no_such_run").c_str()), {"no_such_run", "does not exist"});
  ASSERT_EQ(gpumix_load(s, (dir_ + "/trained").c_str()), 0) << error();  // its latest checkpoint
  EXPECT_STREQ(gpumix_checkpoint(s), gpumix_checkpoint(trained_));
  gpumix_metrics m{};
  ASSERT_EQ(gpumix_get_metrics(s, &m), 0);
  EXPECT_EQ(m.step, 2);
  const std::vector<int32_t> prompt = {84, 104, 101};
  std::vector<int32_t> a(8), b(8);
  ASSERT_EQ(gpumix_generate(s, prompt.data(), 3, 8, 0.8f, 20, 9, a.data()), 0) << error();
  ASSERT_EQ(gpumix_generate(trained_, prompt.data(), 3, 8, 0.8f, 20, 9, b.data()), 0) << error();
  EXPECT_EQ(a, b);
  gpumix_session_destroy(s);
}

TEST_F(CApi, OneSessionPerRunFolder) {
  const TinyConfig cfg(dir_ + "/one_folder");
  gpumix_session* first = gpumix_session_create(&cfg.c);
  ASSERT_NE(first, nullptr) << error();
  EXPECT_EQ(gpumix_session_create(&cfg.c), nullptr);
  for (const std::string& part : {dir_ + "/one_folder is in use by another run",
                                  "pid " + std::to_string(::getpid()) + " on ", std::string("out_dir")})
    EXPECT_NE(error().find(part), std::string::npos) << "'" << part << "' missing from: " << error();
  gpumix_session_destroy(first);
  gpumix_session* second = gpumix_session_create(&cfg.c);
  EXPECT_NE(second, nullptr) << error();
  gpumix_session_destroy(second);
  // A folder that already holds a run is refused too (gpumix_load it into a new folder).
  const TinyConfig used(dir_ + "/trained2");
  gpumix_session* s = gpumix_session_create(&used.c);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(gpumix_train(s, tokens_.data(), (int64_t)tokens_.size(), 1), 0) << error();
  gpumix_session_destroy(s);
  EXPECT_EQ(gpumix_session_create(&used.c), nullptr);
  EXPECT_NE(error().find("already holds a run"), std::string::npos) << error();
}

// The launcher's one run-folder check (dist::claim_run_folder), as `gpumix train` has it: a
// log with lines is a run, an empty one a run that failed before its first step.
TEST_F(CApi, AFolderHoldsARunWhenItsLogHasLines) {
  const TinyConfig cfg(dir_ + "/log_lines");
  fs::create_directories(cfg.c.out_dir);
  std::ofstream(std::string(cfg.c.out_dir) + "/log.jsonl").close();
  gpumix_session* s = gpumix_session_create(&cfg.c);
  EXPECT_NE(s, nullptr) << error();
  gpumix_session_destroy(s);
  std::ofstream(std::string(cfg.c.out_dir) + "/log.jsonl") << "{\"step\": 1}\n";
  EXPECT_EQ(gpumix_session_create(&cfg.c), nullptr);
  for (const std::string& part : {"run folder " + std::string(cfg.c.out_dir) + " already holds a run",
                                  std::string("choose another out_dir")})
    EXPECT_NE(error().find(part), std::string::npos) << "'" << part << "' missing from: " << error();
}

// SIGTERM during gpumix_train (a job's time limit) and gpumix_request_stop (a host that
// handles SIGTERM itself): GPUMIX_STOPPED after the step in flight, that step checkpointed,
// and the next gpumix_train continues from it.
void expect_stopped_and_continued(const std::string& out, const std::function<void()>& stop,
                                  const std::vector<int32_t>& tokens) {
  TinyConfig cfg(out);
  cfg.c.total_steps = 1000000;
  gpumix_session* s = gpumix_session_create(&cfg.c);
  ASSERT_NE(s, nullptr) << error();
  std::thread stopper([&] {
    // The signal handler exists only inside gpumix_train: wait for its first steps.
    for (int i = 0; i < 60000 && !fs::exists(out + "/log.jsonl"); ++i) usleep(1000);
    usleep(200000);
    stop();
  });
  const int rc = gpumix_train(s, tokens.data(), (int64_t)tokens.size(), 1000000);
  stopper.join();
  ASSERT_EQ(rc, GPUMIX_STOPPED) << error();
  EXPECT_NE(error().find("stopped by "), std::string::npos) << error();
  gpumix_metrics m{};
  ASSERT_EQ(gpumix_get_metrics(s, &m), 0);
  ASSERT_GT(m.step, 0);
  ASSERT_LT(m.step, 1000000);
  ASSERT_NE(gpumix_checkpoint(s), nullptr);
  EXPECT_NE(std::string(gpumix_checkpoint(s)).find(std::to_string(m.step)), std::string::npos) << gpumix_checkpoint(s);
  const int before = m.step;
  ASSERT_EQ(gpumix_train(s, tokens.data(), (int64_t)tokens.size(), 2), 0) << error();
  ASSERT_EQ(gpumix_get_metrics(s, &m), 0);
  EXPECT_EQ(m.step, before + 2);
  gpumix_session_destroy(s);
}

TEST_F(CApi, SigtermStopsTrainingWithACheckpoint) {
  expect_stopped_and_continued(dir_ + "/sigterm", [] { kill(getpid(), SIGTERM); }, tokens_);
}

TEST_F(CApi, RequestStopStopsTrainingWithACheckpoint) {
  expect_stopped_and_continued(dir_ + "/request_stop", [] { gpumix_request_stop(); }, tokens_);
}

TEST_F(CApi, BadCallsSayWhatIsWrong) {
  std::vector<float> out(4 * 17 * 256);
  std::vector<int32_t> bad(tokens_.begin(), tokens_.begin() + 32);
  expect_error(gpumix_forward(trained_, tokens_.data(), nullptr, 1, 17, out.data()), {"seq (17)", "1..16"});
  expect_error(gpumix_forward(trained_, tokens_.data(), nullptr, 0, 16, out.data()), {"batch (0)"});
  expect_error(gpumix_forward(trained_, nullptr, nullptr, 1, 16, out.data()), {"tokens and out must not be NULL"});
  bad[5] = 256;
  expect_error(gpumix_forward(trained_, bad.data(), nullptr, 2, 16, out.data()), {"tokens", "256", "position 5", "[0, 256)"});
  bad[5] = 7;
  bad[20] = -2;
  expect_error(gpumix_forward(trained_, tokens_.data(), bad.data(), 2, 16, out.data()), {"targets", "-2", "position 20"});
  expect_error(gpumix_forward(trained_, bad.data(), nullptr, 2, 16, out.data()), {"tokens", "-2", "position 20"});
  double mean = 0;
  expect_error(gpumix_evaluate(trained_, tokens_.data(), 16, &mean), {"16 tokens", "17"});
  const int32_t prompt[2] = {1, 2};
  int32_t ids[4];
  expect_error(gpumix_generate(trained_, prompt, 0, 4, 0.8f, 20, 1, ids), {"n_prompt", "0"});
  expect_error(gpumix_generate(trained_, prompt, 2, 4, -1.0f, 20, 1, ids), {"temperature", "-1"});
  expect_error(gpumix_generate(trained_, prompt, 2, 4, NAN, 20, 1, ids), {"temperature", "nan"});
  expect_error(gpumix_generate(trained_, prompt, 2, 4, 0.8f, -3, 1, ids), {"top-k", "-3"});
  expect_error(gpumix_generate(trained_, prompt, 2, -4, 0.8f, 20, 1, ids), {"tokens", "-4"});
  const int32_t outside[1] = {999};
  expect_error(gpumix_generate(trained_, outside, 1, 4, 0.8f, 20, 1, ids), {"prompt", "999"});
  expect_error(gpumix_forward(nullptr, tokens_.data(), nullptr, 1, 16, out.data()), {"session is NULL"});
  // The session still works after its bad calls.
  EXPECT_EQ(gpumix_generate(trained_, prompt, 2, 4, 0.8f, 20, 1, ids), 0) << error();
  EXPECT_STREQ(gpumix_last_error(), "");
}

TEST_F(CApi, BadConfigsSayWhatIsWrong) {
  const TinyConfig never(dir_ + "/never");
  gpumix_config c = never.c;
  c.plan = "bogus";
  EXPECT_EQ(gpumix_session_create(&c), nullptr);
  EXPECT_NE(error().find("bogus"), std::string::npos) << error();
  c = never.c;
  c.devices = "gpu:mem=1GiB";
  EXPECT_EQ(gpumix_session_create(&c), nullptr);
  EXPECT_NE(error().find("unknown device type 'gpu'"), std::string::npos) << error();
  c = never.c;
  c.seq = -3;
  EXPECT_EQ(gpumix_session_create(&c), nullptr);
  EXPECT_NE(error().find("seq (-3)"), std::string::npos) << error();
  c = never.c;
  c.dtype = "fp16";
  EXPECT_EQ(gpumix_session_create(&c), nullptr);
  EXPECT_NE(error().find("dtype: unknown value 'fp16'; valid: bf16, fp32 (or f32)"), std::string::npos) << error();
  EXPECT_EQ(gpumix_session_create(nullptr), nullptr);
  EXPECT_NE(error().find("config is NULL"), std::string::npos) << error();
  EXPECT_FALSE(fs::exists(dir_ + "/never")) << "a refused session made its folder";
}

// config.dtype is the run's compute dtype: its log and checkpoint say it.
TEST_F(CApi, TheDtypeIsTheRunsComputeDtype) {
  for (const char* dtype : {"fp32", "bf16"}) {
    const TinyConfig cfg(dir_ + "/dtype_" + dtype);
    gpumix_config c = cfg.c;
    c.dtype = dtype;
    gpumix_session* s = gpumix_session_create(&c);
    ASSERT_NE(s, nullptr) << error();
    ASSERT_EQ(gpumix_train(s, tokens_.data(), (int64_t)tokens_.size(), 1), 0) << error();
    const std::string name = std::string(dtype) == "fp32" ? "f32" : dtype;
    std::ifstream log(std::string(cfg.c.out_dir) + "/log.jsonl");
    std::string first;
    std::getline(log, first);
    EXPECT_NE(first.find("\"dtype\":\"" + name + "\""), std::string::npos) << first;
    std::ifstream meta(std::string(gpumix_checkpoint(s)) + "/meta.json");
    std::stringstream text;
    text << meta.rdbuf();
    EXPECT_NE(text.str().find("\"dtype\": \"" + name + "\""), std::string::npos) << text.str().substr(0, 400);
    gpumix_session_destroy(s);
  }
}

// A plan file as `plan`: the per-rank batches, micro-batches and shares of `gpumix plan --out`.
TEST_F(CApi, APlanFileGivesTheRanksTheirWork) {
  const std::string plan = dir_ + "/plan.json";
  std::ofstream(plan) << R"({"format": "gpumix-plan", "version": 1, "model": {"name": "gpt-nano", "L": 4, "NH": 4,
    "C": 128, "V": 256, "T": 16}, "seq_len": 16, "global_batch": 4,
    "ranks": [{"device": "cpu", "batch": 1, "micro_batch": 1, "share": 0.25},
              {"device": "cpu", "batch": 3, "micro_batch": 2, "share": 0.75}]})";
  TinyConfig cfg(dir_ + "/planned");
  cfg.c.devices = "cpu,cpu";
  cfg.c.plan = plan.c_str();
  gpumix_session* s = gpumix_session_create(&cfg.c);
  ASSERT_NE(s, nullptr) << error();
  ASSERT_EQ(gpumix_train(s, tokens_.data(), (int64_t)tokens_.size(), 2), 0) << error();
  gpumix_metrics planned{}, whole{};
  ASSERT_EQ(gpumix_get_metrics(s, &planned), 0);
  ASSERT_EQ(gpumix_get_metrics(trained_, &whole), 0);
  // The same model as the one-rank session's (fp32 rounding apart: tests/dist_engine's 1e-5).
  EXPECT_NEAR(planned.loss, whole.loss, 1e-5 * whole.loss);
  gpumix_session_destroy(s);
  TinyConfig three(dir_ + "/planned3");
  three.c.devices = "cpu,cpu,cpu";
  three.c.plan = plan.c_str();
  EXPECT_EQ(gpumix_session_create(&three.c), nullptr);
  EXPECT_NE(error().find("is for 2 ranks but 3 are running"), std::string::npos) << error();
}

}  // namespace
