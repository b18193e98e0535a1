package servecmd

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/spf13/pflag"

	"github.com/starlog/starlog/star/server"
)

// tlsFlags are star serve's TLS settings: serve TLS itself (cert and key),
// and trust a CA for peers that do.
type tlsFlags struct {
	cert, key, ca string
}

func (f *tlsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "serve TLS (HTTP/1.1 and HTTP/2 by ALPN; no cleartext listener) with this PEM certificate chain; needs --tls-key")
	fs.StringVar(&f.key, "tls-key", "", "the PEM private key of --tls-cert")
	fs.StringVar(&f.ca, "tls-ca", "", "PEM certificates to trust when dialling peers that serve TLS (empty: the system's roots)")
}

// tlsSetup is what the flags load: the serving config (nil: no TLS) and
// the peers' client config.
type tlsSetup struct {
	serve *tls.Config
	peer  *tls.Config
}

func (f *tlsFlags) load() (tlsSetup, error) {
	var st tlsSetup
	switch {
	case f.cert != "" && f.key == "":
		return st, errors.New("star serve: " + flagRef("tls-cert") + " needs " + flagRef("tls-key"))
	case f.key != "" && f.cert == "":
		return st, errors.New("star serve: " + flagRef("tls-key") + " needs " + flagRef("tls-cert"))
	case f.cert != "":
		var err error
		if st.serve, err = server.LoadServerTLS(f.cert, f.key); err != nil {
			return st, err
		}
	}
	if f.ca != "" || st.serve != nil {
		var err error
		if st.peer, err = server.LoadPeerTLS(f.ca); err != nil {
			return st, err
		}
	}
	return st, nil
}

// httpsAddress gives an advertised address the https scheme (peers then
// dial it over TLS) unless it names a scheme already.
func httpsAddress(addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	return "https://" + addr
}

// serve serves ln on hs, over TLS when tlsOn (hs then comes from
// HTTPSServer, which holds the certificate).
func serve(hs *http.Server, ln net.Listener, tlsOn bool) error {
	if tlsOn {
		return hs.ServeTLS(ln, "", "")
	}
	return hs.Serve(ln)
}
