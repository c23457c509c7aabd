// ShardId: which part of a merged parameter a checkpoint tensor fills.
//
// The seeds' `loaded_shard_id`: none for plain layers, an index into output_sizes for
// MergedColumnParallelLinear (gate_proj = 0, up_proj = 1), "q"/"k"/"v" for
// QKVParallelLinear.
#ifndef TPSERVE_WORKER_LAYERS_SHARD_ID_H_
#define TPSERVE_WORKER_LAYERS_SHARD_ID_H_

#include <string>
#include <variant>

namespace tpserve {

using ShardId = std::variant<std::monostate, int, std::string>;

inline const ShardId kNoShard = std::monostate{};

inline std::string ShardIdToString(const ShardId& id) {
  if (std::holds_alternative<int>(id)) return std::to_string(std::get<int>(id));
  if (std::holds_alternative<std::string>(id)) return "\"" + std::get<std::string>(id) + "\"";
  return "none";
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LAYERS_SHARD_ID_H_
