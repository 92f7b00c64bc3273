package services_test

import (
	"github.com/troy-audit/troy/pkg/trace"
)

type traceT = trace.Trace

func parseTrace(b []byte) (*trace.Trace, error) { return trace.Parse(b, trace.DefaultLimits()) }
