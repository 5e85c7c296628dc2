-- Argo CD health check for serving.modelservice.dev/ModelService.
-- Register it in argocd-cm under
--   resource.customizations.health.serving.modelservice.dev_ModelService
-- (see README.md). Argo CD sets `obj` to the live object.
--
--   Healthy     Ready=True for the current metadata.generation
--   Degraded    Degraded=True (its message is shown), Progressing=False
--               with reason ProgressDeadlineExceeded, or CanaryHealthy=False
--               (the operator rolled the canary back; the stable track
--               still serves, but the version being tried has failed)
--   Progressing everything else: no status yet, status.observedGeneration
--               behind metadata.generation (the operator has not acted on the
--               latest spec), a rollout in progress, a model still loading
local hs = {}

local function condition(conditions, ctype)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

local function describe(c, fallback)
  if c == nil then
    return fallback
  end
  if c.message ~= nil and c.message ~= "" then
    if c.reason ~= nil and c.reason ~= "" then
      return c.reason .. ": " .. c.message
    end
    return c.message
  end
  if c.reason ~= nil and c.reason ~= "" then
    return c.reason
  end
  return fallback
end

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to act on generation " .. tostring(generation)
  if observed ~= nil then
    hs.message = hs.message .. " (status describes generation " .. tostring(observed) .. ")"
  end
  return hs
end

-- A condition written for an older generation says nothing about this spec.
local function current(c)
  if c == nil then
    return nil
  end
  if generation ~= nil and c.observedGeneration ~= nil and c.observedGeneration < generation then
    return nil
  end
  return c
end

local conditions = obj.status.conditions
local ready = current(condition(conditions, "Ready"))
local progressing = current(condition(conditions, "Progressing"))
local degraded = current(condition(conditions, "Degraded"))

if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded, "ModelService is degraded")
  return hs
end

local canary = current(condition(conditions, "CanaryHealthy"))
if canary ~= nil and canary.status == "False" then
  hs.status = "Degraded"
  hs.message = "canary rolled back: " .. describe(canary, "the canary failed")
  return hs
end

if progressing ~= nil and progressing.status == "False" and progressing.reason == "ProgressDeadlineExceeded" then
  hs.status = "Degraded"
  hs.message = describe(progressing, "ProgressDeadlineExceeded")
  return hs
end

if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready, "Ready")
  return hs
end

hs.status = "Progressing"
if ready ~= nil then
  hs.message = describe(ready, "Waiting for the model to become ready")
elseif progressing ~= nil then
  hs.message = describe(progressing, "Waiting for the model to become ready")
else
  hs.message = "Waiting for the model to become ready"
end
return hs
