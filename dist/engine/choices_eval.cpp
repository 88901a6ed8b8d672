#include "dist/engine/choices_eval.h"

#include <algorithm>

#include "core/ops.h"
#include "core/tensor.h"

namespace gpumix::dist {

ChoicesScore score_choices(Engine& engine, Comm& comm, const std::vector<ChoiceExample>& examples, int64_t seq,
                           const ExampleRange& range_of, Device host, Device device) {
  const int64_t total = (int64_t)examples.size();
  const int rank = comm.rank(), ranks = comm.size();
  const auto [first, last] = range_of(rank, total);
  int64_t passes = 0;
  for (int r = 0; r < ranks; ++r) {
    const auto [a, b] = range_of(r, total);
    passes = std::max(passes, b - a);
  }
  ChoicesScore mine;
  for (int64_t p = 0; p < passes; ++p) {
    const int64_t k = first + p;
    const bool scoring = k < last;
    if (!scoring && ranks == 1) break;
    ChoiceRows rows;
    if (scoring) rows = choice_rows(examples[k], seq, true);
    Tensor in = Tensor::empty({rows.rows, seq}, DType::i32, host);
    Tensor tg = Tensor::empty({rows.rows, seq}, DType::i32, host);
    std::copy(rows.inputs.begin(), rows.inputs.end(), in.data<int32_t>());
    std::copy(rows.targets.begin(), rows.targets.end(), tg.data<int32_t>());
    if (!device.is_cpu()) {
      in = in.to(device);
      tg = tg.to(device);
    }
    // Micro-batches of one row: the loss sum of each completion apart.
    const std::vector<float> sums = ops::read_scalars(engine.loss_sums(in, tg, 1));
    if (scoring) add_choice(mine, examples[k], std::vector<double>(sums.begin(), sums.end()), rows.context_dropped > 0);
  }
  ChoicesScore all;
  all.examples = (int64_t)comm.all_reduce_sum((double)mine.examples);
  all.correct = (int64_t)comm.all_reduce_sum((double)mine.correct);
  all.correct_sum = (int64_t)comm.all_reduce_sum((double)mine.correct_sum);
  all.truncated = (int64_t)comm.all_reduce_sum((double)mine.truncated);
  all.chance_sum = comm.all_reduce_sum(mine.chance_sum);
  return all;
}

}  // namespace gpumix::dist
