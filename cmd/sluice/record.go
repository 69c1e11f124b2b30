package main

import (
	"log/slog"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/record"
)

// openRecorder opens RECORD_FILE's recorder; nil when it is not set.
func openRecorder(cfg config.Config, log *slog.Logger) (*record.Recorder, error) {
	if cfg.RecordFile == "" {
		return nil, nil
	}
	rc, err := record.Open(record.Config{Path: cfg.RecordFile, MaxBytes: cfg.RecordMax, Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("recording the shape of Messages requests (no text, keys or bodies)", "file", cfg.RecordFile, "max_mb", cfg.RecordMax>>20)
	return rc, nil
}
