#!/usr/bin/env bash
# Makes a throw-away certificate authority and certificates for trying odafs over TLS, and
# for the tests. Never for production: the keys are unencrypted and the CA key sits beside
# them.
#
#   scripts/make-test-ca.sh DIR [CLIENT_NAME...]
#
# Writes into DIR (created if missing; files already there are made again):
#   ca.pem ca.key                  the CA (EC P-256, ten years)
#   server.pem server.key          odafsd's: subjectAltName DNS:localhost, IP:127.0.0.1,
#                                  IP:::1 and this host's name
#   client.pem client.key          a client's: subject CN=client, DNS:client.odafs.test
#   NAME.pem NAME.key              for each CLIENT_NAME: CN=NAME, DNS:NAME.odafs.test
#   expired-client.pem/.key        CN=expired-client, valid only in January 2020
#   other-ca.pem other-client.pem/.key   a second CA and a client certificate it signed
#   wrong-name-server.pem/.key     a server certificate for DNS:elsewhere.odafs.test only
#
# Then, for example:
#   odafsd --export /srv/x --listen 127.0.0.1:2049 --tls-cert DIR/server.pem \
#          --tls-key DIR/server.key --tls-ca DIR/ca.pem --clients '127.0.0.1(mtls)'
#   odafs --tls-ca DIR/ca.pem --tls-cert DIR/client.pem --tls-key DIR/client.key \
#          ls odafs://127.0.0.1:2049/
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [CLIENT_NAME...]" >&2; exit 2; }
dir=$1
shift
mkdir -p "$dir"
cd "$dir"
umask 077

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# ca NAME: a self-signed CA certificate NAME.pem with key NAME.key.
ca() {
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 3650 -subj "/O=odafs test/CN=$1" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    2>/dev/null
}

# cert NAME CA USAGE SAN [START END]: NAME.pem signed by CA (serverAuth or clientAuth), valid
# for a year, or from START to END (YYYYMMDDHHMMSSZ) through `openssl ca`, which takes dates.
cert() {
  local name=$1 ca=$2 usage=$3 san=$4
  key "$name.key"
  openssl req -new -key "$name.key" -out "$name.csr" -subj "/O=odafs test/CN=$name" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n'`
        `'extendedKeyUsage=%s\nsubjectAltName=%s\n' "$usage" "$san" >"$name.ext"
  if [ $# -ge 5 ]; then
    local db
    db=$(mktemp -d)
    : >"$db/index.txt"
    cat >"$db/ca.cnf" <<EOF
[ca]
default_ca = test
[test]
database = $db/index.txt
new_certs_dir = $db
serial = $db/serial
default_md = sha256
policy = any
[any]
commonName = supplied
EOF
    openssl rand -hex 8 >"$db/serial"
    openssl ca -batch -config "$db/ca.cnf" -cert "$ca.pem" -keyfile "$ca.key" -in "$name.csr" \
      -out "$name.pem" -startdate "$5" -enddate "$6" -extfile "$name.ext" -notext 2>/dev/null
    rm -rf "$db"
  else
    openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
      -out "$name.pem" -days 365 -extfile "$name.ext" 2>/dev/null
  fi
  rm -f "$name.csr" "$name.ext"
}

ca ca
ca other-ca
host=$(hostname 2>/dev/null || echo localhost)
cert server ca serverAuth "DNS:localhost,DNS:$host,IP:127.0.0.1,IP:::1"
cert wrong-name-server ca serverAuth "DNS:elsewhere.odafs.test"
cert client ca clientAuth "DNS:client.odafs.test"
for name in "$@"; do cert "$name" ca clientAuth "DNS:$name.odafs.test"; done
cert expired-client ca clientAuth "DNS:expired-client.odafs.test" 20200101000000Z 20200131000000Z
cert other-client other-ca clientAuth "DNS:other-client.odafs.test"
rm -f ./*.srl
chmod 644 ./*.pem
echo "$PWD"
