#pragma once
/// \file Plan documents: load with full validation, save.

#include <string>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

Expected<Plan> loadPlan(const std::string& path);
std::optional<Plan> readPlan(JsonReader& reader, const JsonNode& at);
Json planToJson(const Plan& plan);
Status savePlan(const std::string& path, const Plan& plan);

/// Structural checks beyond the JSON shape: stage/device indices in range, layer ranges
/// inside their component, every microbatch's ops present, times ordered. Messages name
/// the JSON pointer of the offending entry (e.g. /ops/17).
Status validatePlanStructure(const Plan& plan);

/// Turns a validatePlanStructure message ("/ops/17/device: …") into
/// "file:line:col: /ops/17/device: …" using the document the plan was read from.
std::string locatePlanProblem(const JsonDocument& doc, const std::string& message);

}  // namespace pipestudio
