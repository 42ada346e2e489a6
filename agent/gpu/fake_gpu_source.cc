#include "agent/gpu/fake_gpu_source.h"

#include <algorithm>
#include <cctype>
#include <memory>

#include "common/token.h"

namespace tide::agent {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

Status BadPart(std::string_view part, const std::string& why) {
  return Status::InvalidArgument("bad fake GPU entry \"" + std::string(part) + "\": " + why +
                                     " (expected COUNTxMODEL:MEMORY, e.g. 4xRTX4090:24GB)",
                                 "fake_gpus");
}

}  // namespace

std::string FakeGpuUuid(const std::string& node_name, int index) {
  std::string h = Sha256Hex("tide-fake-gpu/" + node_name + "/" + std::to_string(index));
  return "GPU-" + h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" +
         h.substr(16, 4) + "-" + h.substr(20, 12);
}

Result<std::vector<api::Gpu>> ParseFakeGpus(std::string_view spec, const std::string& node_name) {
  std::vector<api::Gpu> gpus;
  if (Trim(spec).empty()) {
    return Status::InvalidArgument("empty fake GPU list (expected e.g. 4xRTX4090:24GB)",
                                   "fake_gpus");
  }
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view part = Trim(spec.substr(start, end - start));
    start = end + 1;
    if (part.empty()) return BadPart(part, "empty entry");

    // Optional "COUNTx" prefix: digits followed by 'x'.
    int count = 1;
    size_t digits = 0;
    while (digits < part.size() && std::isdigit(static_cast<unsigned char>(part[digits]))) {
      ++digits;
    }
    std::string_view rest = part;
    if (digits > 0 && digits < part.size() && (part[digits] == 'x' || part[digits] == 'X')) {
      if (digits > 3) return BadPart(part, "count too large");
      count = std::stoi(std::string(part.substr(0, digits)));
      if (count < 1) return BadPart(part, "count must be at least 1");
      rest = part.substr(digits + 1);
    }
    size_t colon = rest.find(':');
    if (colon == std::string_view::npos) return BadPart(part, "missing \":MEMORY\"");
    std::string model_text(Trim(rest.substr(0, colon)));
    std::string memory_text(Trim(rest.substr(colon + 1)));
    std::string model = api::CanonicalGpuModel(model_text);
    if (model.empty()) return BadPart(part, "missing GPU model");
    Result<int64_t> memory_mb = api::ParseMemoryMb(memory_text);
    if (!memory_mb.ok()) return BadPart(part, memory_mb.status().message());
    if (*memory_mb <= 0) return BadPart(part, "memory must be positive");

    for (int i = 0; i < count; ++i) {
      if (static_cast<int>(gpus.size()) >= api::kMaxGpuCount) {
        return Status::InvalidArgument(
            "more than " + std::to_string(api::kMaxGpuCount) + " fake GPUs", "fake_gpus");
      }
      api::Gpu g;
      g.index = static_cast<int>(gpus.size());
      g.name = model_text;
      g.model = model;
      g.memory_mb = *memory_mb;
      g.uuid = FakeGpuUuid(node_name, g.index);
      gpus.push_back(std::move(g));
    }
  }
  return gpus;
}

Result<std::unique_ptr<FakeGpuSource>> FakeGpuSource::Create(std::string_view spec,
                                                             const std::string& node_name) {
  auto gpus = ParseFakeGpus(spec, node_name);
  if (!gpus.ok()) return gpus.status();
  return std::make_unique<FakeGpuSource>(std::move(*gpus));
}

Result<std::vector<api::Gpu>> FakeGpuSource::Discover() { return gpus_; }

Result<std::vector<api::Gpu>> FakeGpuSource::Sample(const std::map<int, int>& busy) {
  std::vector<api::Gpu> out = gpus_;
  for (api::Gpu& g : out) {
    auto it = busy.find(g.index);
    if (it == busy.end()) {
      g.utilization_pct = 0;
      g.memory_used_mb = 0;
      g.temperature_c = 35;
      continue;
    }
    const int pct = std::clamp(it->second, 0, 100);
    // Held by a job: its memory is allocated (10%) even when it computes
    // nothing; work fills it up to 60% and warms the GPU from 40 C to 72 C.
    const int load = std::min(pct, kFakeBusyUtilizationPct);
    g.utilization_pct = pct;
    g.memory_used_mb = g.memory_mb * (10 + 50 * load / kFakeBusyUtilizationPct) / 100;
    g.temperature_c = 40 + 32 * load / kFakeBusyUtilizationPct;
  }
  return out;
}

}  // namespace tide::agent
