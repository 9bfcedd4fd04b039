// LTD's C++ PPO (methods/ltd/ltd_ppo.h) on toy environments with known optima:
// - a contextual bandit (4 one-hot contexts, 4 actions, reward 1 for action (c + 1) mod 4, else
//   0): within 4096 steps the greedy policy picks the best action in every context; with the
//   policy-gradient sign flipped (the test-only switch) it picks it in none;
// - a stop-or-continue chain shaped like LTD's depth episodes (sparse terminal reward
//   1 - 0.1 (k - 4)^2 when stopping at step k, forced stop at k = 7, gamma 0.999): within 6144
//   decisions the greedy policy stops at k = 4; flipped, it does not;
// - save / load at an update boundary continues bitwise like an uninterrupted run.
// Everything is seeded and single-threaded, so the outcomes are deterministic (no false-failure
// rate: a failure is a real change).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "methods/ltd/ltd_ppo.h"
#include "tests/methods/ppo_test_util.h"

namespace specbed {
namespace {

PpoArch SmallArch(int64_t obs, int64_t actions) {
  PpoArch a;
  a.obs_dim = obs;
  a.actions = actions;
  a.actor_hidden = {32};
  a.critic_hidden = {32};
  return a;
}

std::map<std::string, at::Tensor> Init(const PpoArch& a, uint64_t seed) {
  std::map<std::string, at::Tensor> t;
  at::manual_seed(seed);
  auto mlp = [&](const std::string& p, const std::vector<int64_t>& hidden, int64_t out,
                 double out_gain) {
    int64_t w = a.obs_dim;
    for (size_t i = 0; i < hidden.size(); ++i) {
      t[p + "." + std::to_string(i) + ".weight"] = at::randn({hidden[i], w}) * (1.4 / std::sqrt(w));
      t[p + "." + std::to_string(i) + ".bias"] = at::zeros({hidden[i]});
      w = hidden[i];
    }
    t[p + "_out.weight"] = at::randn({out, w}) * (out_gain / std::sqrt(w));
    t[p + "_out.bias"] = at::zeros({out});
  };
  mlp("actor", a.actor_hidden, a.actions, 0.01);
  mlp("critic", a.critic_hidden, 1, 1.0);
  return t;
}

PpoConfig BanditConfig(bool flip) {
  PpoConfig c;
  testing_util::SetSmallPpo(c);
  c.total_steps = 4096;
  c.ent_coef = 0.0;
  c.gamma = 0.9;
  c.seed = 7;
  c.flip_policy_gradient = flip;
  return c;
}

// Trains on the bandit for `updates` updates (deterministic contexts t mod 4).
void RunBandit(PpoAgent& agent, int64_t updates, int64_t* t) {
  float obs[4];
  for (int64_t u = 0; u < updates;) {
    const int64_t ctx = (*t)++ % 4;
    for (int i = 0; i < 4; ++i) obs[i] = i == ctx ? 1.f : 0.f;
    const int64_t a = agent.Act(obs);
    agent.EndEpisode(a == (ctx + 1) % 4 ? 1.0 : 0.0);
    if (agent.ReadyToUpdate()) {
      agent.Update();
      ++u;
    }
  }
}

int BanditCorrect(PpoAgent& agent) {
  int correct = 0;
  float obs[4];
  for (int ctx = 0; ctx < 4; ++ctx) {
    for (int i = 0; i < 4; ++i) obs[i] = i == ctx ? 1.f : 0.f;
    correct += agent.Greedy(obs) == (ctx + 1) % 4;
  }
  return correct;
}

TEST(LtdPpo, LearnsTheBanditOptimumAndFailsWithTheSignFlipped) {
  at::set_num_threads(1);
  for (bool flip : {false, true}) {
    const PpoArch arch = SmallArch(4, 4);
    PpoAgent agent(arch, Init(arch, 3), BanditConfig(flip));
    int64_t t = 0;
    RunBandit(agent, 4096 / 128, &t);
    EXPECT_EQ(agent.steps_done(), 4096);
    if (!flip) {
      EXPECT_EQ(BanditCorrect(agent), 4);
    } else {
      EXPECT_EQ(BanditCorrect(agent), 0);
    }
  }
}

// Chain: obs = one-hot k (8) + k / 10; CONTINUE = 1.
double ChainReward(int64_t k) {
  return 1.0 - 0.1 * (k - 4) * (k - 4);
}

int64_t ChainStop(PpoAgent& agent, bool greedy) {
  float obs[9];
  for (int64_t k = 0;; ++k) {
    for (int i = 0; i < 8; ++i) obs[i] = i == k ? 1.f : 0.f;
    obs[8] = static_cast<float>(k) / 10.f;
    if (k == 7) {
      if (!greedy) agent.EndEpisode(ChainReward(k));
      return k;
    }
    const int64_t a = greedy ? agent.Greedy(obs) : agent.Act(obs);
    if (a == 0) {
      if (!greedy) agent.EndEpisode(ChainReward(k));
      return k;
    }
  }
}

TEST(LtdPpo, LearnsWhereToStopOnAChainAndFailsWithTheSignFlipped) {
  at::set_num_threads(1);
  for (bool flip : {false, true}) {
    const PpoArch arch = SmallArch(9, 2);
    PpoConfig c = BanditConfig(flip);
    c.gamma = 0.999;
    c.total_steps = 6144;
    c.ent_coef = 0.0;
    PpoAgent agent(arch, Init(arch, 5), c);
    while (agent.steps_done() < 6144) {
      ChainStop(agent, false);
      if (agent.ReadyToUpdate()) agent.Update();
    }
    const int64_t stop = ChainStop(agent, true);
    if (!flip) {
      EXPECT_EQ(stop, 4);
    } else {
      EXPECT_NE(stop, 4);
    }
  }
}

TEST(LtdPpo, ResumeContinuesBitwise) {
  at::set_num_threads(1);
  const PpoArch arch = SmallArch(4, 4);
  const auto init = Init(arch, 11);
  PpoAgent straight(arch, init, BanditConfig(false));
  int64_t t1 = 0;
  RunBandit(straight, 4, &t1);

  const std::string dir = ::testing::TempDir() + "/ltd_ppo_resume";
  std::filesystem::create_directories(dir);
  PpoAgent first(arch, init, BanditConfig(false));
  int64_t t2 = 0;
  RunBandit(first, 2, &t2);
  first.Save(dir + "/agent");
  PpoAgent resumed(arch, Init(arch, 99), BanditConfig(false));  // other weights: all overwritten
  resumed.Load(dir + "/agent");
  EXPECT_EQ(resumed.steps_done(), first.steps_done());
  RunBandit(resumed, 2, &t2);
  const auto a = straight.Tensors();
  const auto b = resumed.Tensors();
  for (const auto& [name, tensor] : a) EXPECT_TRUE(at::equal(tensor, b.at(name))) << name;
}

TEST(LtdPpo, LearningRateWarmsUpThenDecaysToZero) {
  const PpoArch arch = SmallArch(4, 4);
  PpoConfig c = BanditConfig(false);
  c.total_steps = 1024;
  c.warmup_frac = 0.25;
  PpoAgent agent(arch, Init(arch, 1), c);
  EXPECT_NEAR(agent.LearningRate(), c.lr / 256.0, 1e-12);  // step 0 counts as 1 of 256
  int64_t t = 0;
  RunBandit(agent, 2, &t);  // 256 steps: warm-up done
  EXPECT_NEAR(agent.LearningRate(), c.lr, 1e-12);
  RunBandit(agent, 6, &t);  // 1024 steps
  EXPECT_NEAR(agent.LearningRate(), 0.0, 1e-12);
}

}  // namespace
}  // namespace specbed
