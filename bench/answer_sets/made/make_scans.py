"""Render two typed "scanned" pages as image-only PDFs (no text layer).

Deterministic: fixed text, fixed font, seeded noise, fixed PDF dates.
Run from anywhere:  python make_scans.py
Writes landlord_letter.pdf and dental_invoice.pdf next to this file.
"""

import random
import time
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

HERE = Path(__file__).resolve().parent
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
W, H = 1700, 2200
MARGIN = 150
FIXED_DATE = time.struct_time((2024, 9, 2, 10, 0, 0, 0, 246, 0))

LANDLORD_LETTER = """\
Harrow & Finch Lettings
22 Cathedral Walk, Norwich NR2 1QT
Tel. 01603 558 210

Ms Abigail Thorne
Flat 3, 41 Magdalen Close
Norwich NR3 4LS

2 September 2024

Dear Ms Thorne,

Re: Your tenancy at Flat 3, 41 Magdalen Close

We are writing on behalf of your landlord, Mr Desmond Achterberg, about two matters.

1. Rent review. Your current rent is £875 per calendar month. Under clause 4.2 of your tenancy agreement, the rent will increase to £910 per calendar month from 1 November 2024. Please amend your standing order before then. The payment date remains the 1st of each month.

2. Annual gas safety check. Our engineer, Carl Mbeki of Broadland Gas Services, will visit on Thursday 19 September between 8am and 12 noon to carry out the annual check of the boiler and the gas hob. If this time is not convenient, please call our office by 13 September to rearrange.

We have also noted your report of a damp patch in the bathroom ceiling. A roofer will inspect the flat roof above the bathroom during the same week.

Your deposit of £1,010 remains protected with the Deposit Protection Service under reference DPS-7734-1196.

Yours sincerely,

Rebecca Lyle
Property Manager, Harrow & Finch Lettings
"""

INVOICE_HEAD = """\
Riverside Dental Practice
7 Quay Street, Bristol BS1 4DB
Tel. 0117 496 0781

INVOICE No. RD-24-08817
Date of invoice: 28 August 2024

Patient: Mr Daniel Okonkwo
Date of birth: 14/03/1986
Address: 19 Cotham Vale, Bristol BS6 6HR
Dentist: Dr Helen Marsh
"""

INVOICE_ROWS = [
    ("Date", "Treatment", "Amount"),
    ("12/08/2024", "Examination and two X-rays", "£65.00"),
    ("12/08/2024", "Scale and polish (hygienist)", "£58.00"),
    ("21/08/2024", "White filling, lower left molar", "£145.00"),
    ("21/08/2024", "Local anaesthetic", "£0.00"),
]

INVOICE_TAIL = """\
Total: £268.00
Paid on the day: £65.00
Balance due: £203.00

Please pay the balance within 30 days of the invoice date by bank transfer to Riverside Dental Practice, sort code 40-12-76, account 61849302, quoting the invoice number as the reference.

This was private treatment and is not covered by NHS charges. If you have dental insurance, you can send a copy of this invoice with your claim form.

Your next check-up is recommended in 6 months. Our reception will contact you to book it.

Thank you for choosing Riverside Dental Practice.
"""


def wrap(draw, text, font, width):
    lines = []
    for para in text.split("\n"):
        if not para:
            lines.append("")
            continue
        line = ""
        for word in para.split(" "):
            trial = word if not line else line + " " + word
            if draw.textlength(trial, font=font) <= width:
                line = trial
            else:
                lines.append(line)
                line = word
        lines.append(line)
    return lines


def add_noise(img, seed):
    rng = random.Random(seed)
    px = img.load()
    for _ in range(2500):
        x, y = rng.randrange(W), rng.randrange(H)
        px[x, y] = rng.randrange(150, 230)


def save_pdf(img, name):
    img.save(HERE / name, resolution=200, quality=45, creationDate=FIXED_DATE, modDate=FIXED_DATE)


def render_text(draw, text, font, y, line_h):
    for line in wrap(draw, text, font, W - 2 * MARGIN):
        draw.text((MARGIN, y), line, font=font, fill=20)
        y += line_h
    return y


def make_letter():
    img = Image.new("L", (W, H), 255)
    draw = ImageDraw.Draw(img)
    font = ImageFont.truetype(str(FONT_DIR / "DejaVuSerif.ttf"), 30)
    render_text(draw, LANDLORD_LETTER, font, MARGIN, 42)
    add_noise(img, 1)
    save_pdf(img, "landlord_letter.pdf")


def make_invoice():
    img = Image.new("L", (W, H), 255)
    draw = ImageDraw.Draw(img)
    font = ImageFont.truetype(str(FONT_DIR / "DejaVuSans.ttf"), 30)
    bold = ImageFont.truetype(str(FONT_DIR / "DejaVuSans-Bold.ttf"), 30)
    y = render_text(draw, INVOICE_HEAD, font, MARGIN, 42) + 20
    cols = [MARGIN, MARGIN + 260, W - MARGIN - 200]
    draw.line((MARGIN, y - 10, W - MARGIN, y - 10), fill=60, width=2)
    for i, row in enumerate(INVOICE_ROWS):
        f = bold if i == 0 else font
        for x, cell in zip(cols, row, strict=True):
            draw.text((x, y), cell, font=f, fill=20)
        y += 48
        if i == 0:
            draw.line((MARGIN, y - 6, W - MARGIN, y - 6), fill=60, width=2)
    draw.line((MARGIN, y + 4, W - MARGIN, y + 4), fill=60, width=2)
    render_text(draw, INVOICE_TAIL, font, y + 40, 42)
    add_noise(img, 2)
    save_pdf(img, "dental_invoice.pdf")


if __name__ == "__main__":
    make_letter()
    make_invoice()
