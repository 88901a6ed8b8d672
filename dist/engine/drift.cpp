#include "dist/engine/drift.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace gpumix::dist {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

DriftMonitor::DriftMonitor(const DriftOptions& options, std::vector<double> predicted_busy_s)
    : options_(options), predicted_(std::move(predicted_busy_s)), run_(predicted_.size(), 0) {}

std::vector<double> DriftMonitor::observe(const std::vector<double>& measured) {
  GPUMIX_CHECK(measured.size() == predicted_.size(), "drift: ", measured.size(), " measured times for ",
               predicted_.size(), " ranks");
  if (options_.threshold <= 0 || ++seen_ <= options_.warmup) return {};
  std::vector<double> ratio(measured.size(), 0), judged;
  for (size_t i = 0; i < measured.size(); ++i)
    if (predicted_[i] > 0 && measured[i] > 0) judged.push_back(ratio[i] = measured[i] / predicted_[i]);
  if (judged.size() < 2) return {};
  const double reference = median(judged);
  bool confirmed = false;
  for (size_t i = 0; i < ratio.size(); ++i) {
    double& r = ratio[i];
    r = r > 0 ? r / reference : 1.0;
    const int side = r > 1.0 + options_.threshold ? 1 : r < 1.0 - options_.threshold ? -1 : 0;
    run_[i] = side != 0 && run_[i] * side > 0 ? run_[i] + side : side;
    confirmed = confirmed || std::abs(run_[i]) >= options_.steps;
  }
  window_.push_back(ratio);
  if ((int)window_.size() > options_.steps) window_.erase(window_.begin());
  if (!confirmed) return {};
  std::vector<double> factors(ratio.size(), 1.0);
  for (size_t i = 0; i < factors.size(); ++i) {
    std::vector<double> history;
    for (const auto& w : window_) history.push_back(w[i]);
    const double f = median(history);
    if (std::fabs(f - 1.0) > options_.threshold) factors[i] = f;
  }
  window_.clear();
  std::fill(run_.begin(), run_.end(), 0);
  seen_ = 0;
  return factors;
}

Profile corrected_profile(const Profile& profile, const std::vector<double>& factors) {
  GPUMIX_CHECK(factors.size() == profile.ranks.size(), "drift: ", factors.size(), " factors for ",
               profile.ranks.size(), " ranks");
  Profile p = profile;
  for (size_t i = 0; i < factors.size(); ++i) {
    if (factors[i] == 1.0) continue;
    const std::string own = profile.ranks[i].device.substr(0, profile.ranks[i].device.find("@rank")) +
                            "@rank" + std::to_string(i);
    auto entry = std::find_if(p.devices.begin(), p.devices.end(), [&](const DeviceProfile& d) { return d.name == own; });
    if (entry == p.devices.end()) {
      const auto shared = std::find_if(p.devices.begin(), p.devices.end(),
                                       [&](const DeviceProfile& d) { return d.name == p.ranks[i].device; });
      GPUMIX_CHECK(shared != p.devices.end(), "drift: rank ", i, "'s device ", p.ranks[i].device, " is not in the profile");
      DeviceProfile copy = *shared;
      copy.name = own;
      p.devices.push_back(copy);
      entry = p.devices.end() - 1;
    }
    DeviceProfile& d = *entry;
    for (MicroBatchSample& s : d.samples) {
      s.block_fwd_s *= factors[i];
      s.block_bwd_s *= factors[i];
      s.head_s *= factors[i];
    }
    d.optimizer_s_per_param *= factors[i];
    d.microbatch_overhead_s *= factors[i];
    d.peak_flops /= factors[i];
    p.ranks[i].device = own;
  }
  // A device type no rank uses any more would only confuse the planner's tables.
  p.devices.erase(std::remove_if(p.devices.begin(), p.devices.end(),
                                 [&](const DeviceProfile& d) {
                                   return std::none_of(p.ranks.begin(), p.ranks.end(),
                                                       [&](const RankInfo& r) { return r.device == d.name; });
                                 }),
                  p.devices.end());
  p.validate();
  return p;
}

}  // namespace gpumix::dist
