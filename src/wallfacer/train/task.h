#pragma once
// A model family as the training loop sees it: a parameter arena and the summed loss of this
// rank's share of a batch, with its backward. The GPT task reads token shards and sums the
// cross-entropy of next-token prediction; the DiT task renders synthetic videos and sums the
// squared error of rectified-flow velocity prediction. One trainer runs either.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/model/parts.h"
#include "wallfacer/train/config.h"

namespace wallfacer::train {

class Task {
 public:
  virtual ~Task() = default;
  virtual int64_t num_params() const = 0;
  virtual float* params() = 0;
  virtual float* grads() = 0;
  virtual const std::vector<model::ParamTensor>& tensors() const = 0;
  virtual void init_params(uint64_t seed) = 0;
  // Sum of the losses of this rank's rows of the training batch of step s (fp64).
  virtual double train_forward(int64_t step) = 0;
  // Same for evaluation batch e (fixed data, the same at every evaluation).
  virtual double eval_forward(int e) = 0;
  virtual void zero_grads() = 0;
  // Adds the gradients of dloss * (the sum of the last forward) to grads().
  virtual void backward(float dloss) = 0;
  // Number of terms the loss of one global batch averages over (tokens for the GPT, pixel values
  // for the DiT).
  virtual double loss_terms() const = 0;
};

// What a model of a config says of itself before it is built: the trainer's memory estimate and
// startup line ask it without knowing which model it is.
struct ModelFacts {
  int64_t num_params = 0;  // as the Task's num_params() gives it
  // The activation values one token row keeps from its forward to its backward: per layer those
  // of attention and the MLP, and the logits of a text model.
  double values_per_row = 0;
  // The startup line's words on the model's options, each starting ", " ("" for none).
  std::string notes;
};

// The facts of the model of cfg.kind.
ModelFacts model_facts(const TrainConfig& cfg);

// The task of cfg.kind for the rank holding clips/sequences [b0, b0 + nb) of each global batch and
// the tokens at `positions`.
std::unique_ptr<Task> make_task(const TrainConfig& cfg, int64_t b0, int nb,
                                const std::vector<int64_t>& positions, model::AttentionOp& attn);

}  // namespace wallfacer::train
