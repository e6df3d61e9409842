#pragma once
// wallfacer's public API in one include (docs/library.md): errors, communicators (also over a
// host's MPI_Comm), distributed attention, the single-process attention kernels and the planner.

#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/mpi_comm.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/plan/cluster.h"
#include "wallfacer/plan/model.h"
#include "wallfacer/plan/placement.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/config.h"
#include "wallfacer/seqpar/strategy.h"
