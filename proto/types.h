// The aqueduct.v1 message types under short names in namespace aqueduct.
#ifndef AQUEDUCT_PROTO_TYPES_H_
#define AQUEDUCT_PROTO_TYPES_H_

#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace aqueduct {

using v1::AdamSpec;
using v1::CausalSelfAttentionSpec;
using v1::Conv2dSpec;
using v1::DataSpec;
using v1::DelaySpec;
using v1::DropoutSpec;
using v1::IdxData;
using v1::JobSpec;
using v1::LayerNormSpec;
using v1::LayerProfile;
using v1::LayerSpec;
using v1::LinearSpec;
using v1::LrSchedule;
using v1::MaxPool2dSpec;
using v1::ModelProfile;
using v1::ModelSpec;
using v1::OptimizerSpec;
using v1::ParamGroup;
using v1::PartitionPlan;
using v1::PlanStage;
using v1::PositionEmbeddingSpec;
using v1::ProfileEdge;
using v1::SgdSpec;
using v1::SyntheticData;
using v1::TextData;
using v1::TokenEmbeddingSpec;
using v1::TopologyLevel;
using v1::TransformerBlockSpec;

}  // namespace aqueduct

#endif  // AQUEDUCT_PROTO_TYPES_H_
