/* unigrad: one include for the whole public API. */
#ifndef UNIGRAD_H
#define UNIGRAD_H

#include "unigrad/status.h"
#include "unigrad/dtype.h"
#include "unigrad/device.h"
#include "unigrad/stream.h"
#include "unigrad/memory.h"
#include "unigrad/tensor.h"
#include "unigrad/ops.h"
#include "unigrad/graph.h"
#include "unigrad/conv.h"
#include "unigrad/attention.h"
#include "unigrad/generate.h"
#include "unigrad/nn.h"
#include "unigrad/optim.h"
#include "unigrad/data.h"
#include "unigrad/tokens.h"
#include "unigrad/checkpoint.h"
#include "unigrad/trainer.h"
#include "unigrad/profiler.h"
#include "unigrad/tensorboard.h"
#include "unigrad/monitor.h"
#include "unigrad/comm.h"
#include "unigrad/pipeline.h"

#define UG_VERSION_MAJOR 0
#define UG_VERSION_MINOR 1
#define UG_VERSION_PATCH 0

#endif
