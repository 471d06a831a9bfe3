# Included by check_structure.cmake (refuse_lines and SOURCE_DIR come from
# it). The core's layers from the bottom up:
#   runtime/  devices, memory, tensors, the one path into a backend
#   ops/      op definitions: inference, launch, gradient, fold traits
#   model/    models' parameters and optimizers' state
#   graph/    values and nodes, autograd, fusion, plan, run
#   train/    layers, the trainer, its metrics
# A folder includes nothing of a folder above it, so there is no circle
# between them: ops see a graph only through what core/ops/op.h declares
# (ug_op_node, ug_run_state and the few services a graph gives its ops),
# and the graph sees models and optimizers through core/model/internal.h.
set(core_layers runtime ops model graph train)
list(LENGTH core_layers layer_count)
math(EXPR last "${layer_count} - 1")
foreach(i RANGE ${last})
  list(GET core_layers ${i} layer)
  set(above "")
  math(EXPR next "${i} + 1")
  if(next LESS_EQUAL last)
    foreach(j RANGE ${next} ${last})
      list(GET core_layers ${j} upper)
      list(APPEND above "core/${upper}/")
    endforeach()
  endif()
  if(NOT above)
    continue()
  endif()
  list(JOIN above "|" forbidden)
  file(GLOB_RECURSE layer_files "${SOURCE_DIR}/core/${layer}/*.c" "${SOURCE_DIR}/core/${layer}/*.h")
  if(NOT layer_files)
    message(FATAL_ERROR "no sources in core/${layer}/: the layer list in core_layers.cmake is out of date")
  endif()
  refuse_lines("${layer_files}" "#[ \t]*include[ \t]+\"(${forbidden})"
               "core/${layer}/ includes a layer above it (runtime < ops < model < graph < train; give the lower layer an interface instead, as core/ops/op.h does for graphs)")
endforeach()
# The public headers of the top layer count as it.
file(GLOB_RECURSE below_train "${SOURCE_DIR}/core/runtime/*.[ch]" "${SOURCE_DIR}/core/ops/*.[ch]"
     "${SOURCE_DIR}/core/model/*.[ch]" "${SOURCE_DIR}/core/graph/*.[ch]")
refuse_lines("${below_train}" "#[ \t]*include[ \t]+\"unigrad/(trainer|nn)\\.h\""
             "a layer under core/train/ includes the trainer's or the layers' public header")
list(JOIN core_layers " < " order)
message(STATUS "core layers include only downwards: ${order}")
