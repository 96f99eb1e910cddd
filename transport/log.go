package transport

import (
	"errors"
	"fmt"
	"log/slog"
)

var errInjectedReset = errors.New("transport: connection reset by fault injection")

// logger routes the node's and gnet's log lines to a slog.Logger.
type logger struct{ *slog.Logger }

func (l logger) Debugf(format string, args ...any) { l.Debug(fmt.Sprintf(format, args...)) }
func (l logger) Infof(format string, args ...any)  { l.Info(fmt.Sprintf(format, args...)) }
func (l logger) Warnf(format string, args ...any)  { l.Warn(fmt.Sprintf(format, args...)) }
func (l logger) Errorf(format string, args ...any) { l.Error(fmt.Sprintf(format, args...)) }
func (l logger) Fatalf(format string, args ...any) { l.Error(fmt.Sprintf(format, args...)) }
