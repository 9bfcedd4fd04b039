// The small PPO setting the LTD tests train with (the toy environments of ltd_ppo_test.cpp and
// the simulated `specbed train ltd` runs of ltd_trainer_test.cpp).
// Checked by: tests/methods/ltd_ppo_test.cpp, tests/methods/ltd_trainer_test.cpp.
#pragma once

#include "methods/ltd/ltd_ppo.h"

namespace specbed {
namespace testing_util {

// Rollouts of 128 transitions, minibatches of 32, 4 epochs per rollout, learning rate 3e-3; the
// other settings of `c` are kept.
inline void SetSmallPpo(PpoConfig& c) {
  c.n_steps = 128;
  c.minibatch = 32;
  c.epochs = 4;
  c.lr = 3e-3;
}

}  // namespace testing_util
}  // namespace specbed
