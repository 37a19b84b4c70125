# syntax=docker/dockerfile:1
# A static Sluice binary (CGO off) in a minimal image running as non-root (uid 65532).
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 sluice serve --addr :8080
# Kubernetes manifests: deploy/kubernetes/. `go test ./test/deploy` builds the binary with
# the go build line below and starts it.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/sluice ./cmd/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve", "--addr", ":8080"]
