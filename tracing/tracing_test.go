package tracing

import (
	"context"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		enabled bool
		env     map[string]string
		want    bool   // a provider is built
		wantErr string // in the error, if one is wanted
	}{
		{"off by default", false, nil, false, ""},
		{"on", true, nil, true, ""},
		{"OTEL_SDK_DISABLED wins", true, map[string]string{"OTEL_SDK_DISABLED": "TRUE"}, false, ""},
		{"OTEL_SDK_DISABLED=false is not off", true, map[string]string{"OTEL_SDK_DISABLED": "false"}, true, ""},
		{"OTEL_TRACES_EXPORTER=none", true, map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false, ""},
		{"another exporter is refused", true, map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
		{"gRPC is refused", true, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "http/protobuf only"},
		{"the traces protocol beats the general one", true,
			map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, ""},
		{"http/json is refused", true, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, false, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(k, tc.env[k])
			}
			p, err := New(context.Background(), tc.enabled)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			if got := p.TracerProvider != nil; got != tc.want {
				t.Errorf("provider built: %v; want %v", got, tc.want)
			}
		})
	}
}
